"""The cyclic garbage collector during start-up.

Importing torch, transformers, peft and datasets creates about a million long-lived objects (modules,
functions, classes), and CPython's collector walks all of them again each time a full collection
triggers: six times during those imports, 0.6-0.8 s of a 3.3 s import here. Then the Trainer calls
``gc.collect()`` before its first step (accelerate's ``free_memory``), another 0.25 s over the same
objects. None of that finds garbage worth the time: import-time objects live as long as the process.

So ``tunekit train`` (a run on the CPU: ``train/decisions/cpu_host.py``; a GPU run never imports this) pauses the
collector while it imports and builds, and :func:`settle` moves
everything alive at that point into the permanent generation (``gc.freeze``, the documented tool for
exactly this) and turns collection back on. Later collections only walk what was created since.
Reference counting frees ordinary garbage all along; only reference cycles created while paused wait,
and the pause ends before data preprocessing, the one start-up phase that allocates in proportion to
the data. ``TUNEKIT_GC_PAUSE=0`` keeps the collector as Python sets it.
"""

from __future__ import annotations

import gc

from ..env import env_flag


def enabled() -> bool:
    return env_flag("TUNEKIT_GC_PAUSE", True)


#: "paused": pause() ran, so this process is the tunekit program, whose start-up objects live as long as it
_state = {"paused": False}


def pause() -> None:
    """Stop automatic collection until :func:`settle` (no-op with ``TUNEKIT_GC_PAUSE=0``). Only the program calls
    this (``tunekit train``): a process that runs training as a function, such as a test session, keeps its
    collector, since freezing there would keep whatever it held before (earlier models) for good."""
    if enabled():
        gc.disable()
        _state["paused"] = True


def settle() -> None:
    """After :func:`pause`: freeze what is alive now (later collections skip it) and collect automatically again.
    Called at each point where the long-lived objects are built (after the imports, after the trainer)."""
    if _state["paused"]:
        gc.freeze()
        gc.enable()
