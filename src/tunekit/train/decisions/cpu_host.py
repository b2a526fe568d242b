"""The CPU-host machinery's decisions: malloc tuning, the collector pause, the heap guard (``tunekit.host``).

They exist for a process whose model trains on the CPU, where every tensor comes from glibc's malloc. On a GPU the
CUDA caching allocator holds the training's memory and none of them was measured there: off by default, and
``tunekit.host`` is not imported. ``TUNEKIT_MALLOC_TUNE=1`` / ``TUNEKIT_GC_PAUSE=1``, set explicitly, opt in there;
``=0`` turns them off on the CPU. The heap guard trims the host heap the model's tensors live in: CPU only.
"""

from __future__ import annotations

from ...config.schema import Config
from ...env import env_flag
from .features import Decision, off, on

NOT_ON_GPU = "the model is on a {kind} device: its memory is not the host heap's, and this was never measured there"


def _switch(env: str, machine, what: str) -> Decision:
    if machine.kind == "cpu":
        return on(what) if env_flag(env, True) else off(f"{env}=0")
    if env_flag(env, False):
        return on(f"{env} set: opted in on the {machine.kind.upper()} device")
    return off(NOT_ON_GPU.format(kind=machine.kind.upper()) + f"; {env}=1 opts in")


def malloc_tune(cfg: Config, machine) -> Decision:
    """glibc keeps freed blocks for the next step (``host/malloc.py``)."""
    return _switch("TUNEKIT_MALLOC_TUNE", machine, "glibc keeps freed blocks for the next step")


def gc_pause(cfg: Config, machine) -> Decision:
    """The cyclic collector paused while the program imports and builds (``host/gc_pause.py``)."""
    return _switch("TUNEKIT_GC_PAUSE", machine, "the collector paused while the program imports and builds")


def heap_guard(cfg: Config, machine) -> Decision:
    """Freed heap memory a forward pass strands returned to the kernel (``host/heap.py``): the model on the CPU,
    glibc's heap readable (``host.malloc.available``: glibc on Linux, malloc tuning on)."""
    if machine.kind != "cpu":
        return off(NOT_ON_GPU.format(kind=machine.kind.upper()))
    if not malloc_tune(cfg, machine).on:
        return off("TUNEKIT_MALLOC_TUNE=0")
    from ...host import malloc

    if not malloc.available():
        return off("glibc's mallinfo2/malloc_trim are not available here")
    return on("stranded heap memory trimmed when a forward pass would make a new peak")
