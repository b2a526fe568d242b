"""Pickle files that others may have written (a ``.bin`` adapter, a resumed checkpoint's ``optimizer.pt``,
``scheduler.pt``, ``rng_state.pth``) are checked before transformers/PEFT load them.

Those libraries load them with ``torch.load(weights_only=True)``, which never runs code from a file but refuses a
crafted one with a long traceback that names no file and suggests ``weights_only=False`` (which would run the
code). Here such a file is a one-line :class:`~tunekit.errors.ModelError` that names it, says it could not be
loaded safely, and how to go on without it. The check reads only the file's pickle (``torch.save`` files: not
their tensors), with the same allow-list as the loader that will read it.

DeepSpeed loads its ``global_step*/*.pt`` files (model and optimizer states) with ``weights_only=False``, which runs
whatever a crafted file names. Before a resume hands them to DeepSpeed, each is read here as transformers would read
a checkpoint: ``weights_only=True`` with the few DeepSpeed types a real ZeRO checkpoint holds
(:data:`DEEPSPEED_SAFE_GLOBALS`, also the allow-list of ``export/zero.py``), memory-mapped so that no tensor is read.
That full restricted load (not only the scan of the named globals, which misses names built on the pickle's stack)
is what makes DeepSpeed's own load of the same bytes safe.
"""

from __future__ import annotations

import contextlib
import pickle
from pathlib import Path

from ..errors import ModelError

#: the non-torch types DeepSpeed pickles into ZeRO checkpoints (optimizer states: the stage enum, the loss scaler
#: object, the fp32 fragment addresses); plain data classes and enums, built without running code. Found in
#: checkpoints written by deepspeed 0.19.8 (tests/export/test_zero_untrusted.py checks a real one).
DEEPSPEED_SAFE_GLOBALS = (
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.utils.tensor_fragment.fragment_address",
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
)


def deepspeed_safe_classes() -> list:
    """The classes of :data:`DEEPSPEED_SAFE_GLOBALS` that this DeepSpeed has (another version: not in its files)."""
    import importlib

    out = []
    for name in DEEPSPEED_SAFE_GLOBALS:
        module, _, attr = name.rpartition(".")
        with contextlib.suppress(ImportError, AttributeError):
            out.append(getattr(importlib.import_module(module), attr))
    return out


def _numpy_globals() -> list:
    """What transformers allows in ``rng_state.pth`` (``trainer_pt_utils.safe_globals``: numpy's random state)."""
    import numpy as np

    core = np._core if hasattr(np, "_core") else np.core
    return [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def unsafe_globals(path: Path, allow_numpy: bool = False, allow: tuple[str, ...] = ()) -> list[str] | None:
    """The names in ``path``'s pickle that a ``weights_only`` load refuses (empty: safe), besides those in ``allow``;
    None: not a zip-format ``torch.save`` file (legacy format, plain pickle, damaged) or a pickle the scan cannot
    follow (protocol 4's names built on the stack), which only a ``weights_only`` load can judge."""
    import torch

    allowed = _numpy_globals() if allow_numpy else []
    try:
        with torch.serialization.safe_globals(allowed):
            names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except (ValueError, RuntimeError, OSError, EOFError, pickle.UnpicklingError):
        return None
    return sorted(name for name in names if name not in allow)


def _restricted_load(path: Path, allowed: list, mmap: bool) -> None:
    """``torch.load(weights_only=True)`` of ``path``, the result dropped (``mmap``: its tensors are not read)."""
    import warnings

    import torch

    with torch.serialization.safe_globals(allowed), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
        torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)


def check_pickle_file(path: Path, what: str, fix: str, allow_numpy: bool = False, deepspeed: bool = False) -> None:
    """Raise a one-line :class:`ModelError` when loading ``path`` (``what`` it is) would need to run code from it.
    ``deepspeed``: a file DeepSpeed will load with ``weights_only=False``: its allow-list, and always the full
    restricted load (the scan alone judges only what a ``weights_only`` loader reads next)."""

    path = Path(path)
    names = unsafe_globals(path, allow_numpy, DEEPSPEED_SAFE_GLOBALS if deepspeed else ())
    if names is None or (deepspeed and not names):  # let the weights_only loader judge it, keeping only its verdict
        allowed = (_numpy_globals() if allow_numpy else []) + (deepspeed_safe_classes() if deepspeed else [])
        try:
            _restricted_load(path, allowed, mmap=names is not None)
            return
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, AttributeError, ImportError) as exc:
            first = str(exc).splitlines()[0][:120] if str(exc) else ""
            why = (
                "its pickle holds more than tensors and plain data"
                if (isinstance(exc, pickle.UnpicklingError) or "weights_only" in first)
                else f"{type(exc).__name__}: {first}"
            )
            raise ModelError(
                f"{path} could not be loaded safely ({why}); tunekit never runs code from a pickle. {fix}"
            ) from None
    if names:
        raise ModelError(
            f"{path} could not be loaded safely: its pickle names {', '.join(names[:6])}, which {what} "
            f"never holds (loading it would run code from the file). {fix}"
        )


def check_adapter_folder(folder: str | Path) -> None:
    """A PEFT adapter saved as ``adapter_model.bin`` (no ``.safetensors`` beside it, which PEFT would read instead)."""
    folder = Path(folder)
    path = folder / "adapter_model.bin"
    if folder.is_dir() and path.is_file() and not (folder / "adapter_model.safetensors").is_file():
        check_pickle_file(
            path,
            "a PEFT adapter",
            "Use a copy of the adapter saved as adapter_model.safetensors (PEFT's "
            "default), or convert this one only where you trust its source.",
        )


#: the pickles transformers loads when it resumes a checkpoint (besides rng_state*.pth); it never loads
#: training_args.bin
RESUME_PICKLES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "pytorch_model.bin", "adapter_model.bin")


def check_resume_pickles(folder: str | Path) -> None:
    """The pickles of a checkpoint about to be resumed (``train/resume.plan_resume``), DeepSpeed's
    ``global_step*/*.pt`` (model and optimizer states) included."""
    fix = (
        "Resume from another checkpoint (resume_from_checkpoint: PATH), "
        "or train afresh without resume_from_checkpoint."
    )
    folder = Path(folder)
    for path in sorted(folder.iterdir()):
        rng = path.name.startswith("rng_state") and path.suffix == ".pth"
        if path.is_file() and (path.name in RESUME_PICKLES or rng):
            check_pickle_file(path, "a training checkpoint", fix, allow_numpy=rng)
    for path in sorted(folder.glob("global_step*/*.pt")):
        if path.is_file():
            check_pickle_file(path, "a DeepSpeed checkpoint", fix, deepspeed=True)
