"""CPU-host machinery: what exists only for a training process whose model is on the CPU.

- :mod:`.malloc`: glibc's malloc keeps freed blocks for the next step (``TUNEKIT_MALLOC_TUNE``);
- :mod:`.gc_pause`: the cyclic collector paused while the program imports and builds (``TUNEKIT_GC_PAUSE``);
- :mod:`.heap`: the heap guard, freed heap memory a forward pass strands returned to the kernel.

Whether each applies is decided once, from the device the run will use (``tunekit.train.decisions``): a run whose
model is on a GPU never imports this package (tests/train/test_run_decisions.py checks ``sys.modules``). Nothing here
has been measured on a GPU, so on CUDA each is off by default; ``TUNEKIT_MALLOC_TUNE=1`` / ``TUNEKIT_GC_PAUSE=1`` set
explicitly opt in there. The package imports only the top-level helpers (``env``), so every layer may import it.
"""
