"""Checkpoints that are never torn: a checkpoint counts only once its completion marker exists.

The trainer writes ``checkpoint-N/``; after the save returns, rank 0 writes ``tunekit_complete.json``
(file names and sizes) atomically. ``resume_from_checkpoint: true`` takes the newest *complete*
checkpoint, so a run killed while saving resumes from the previous one. A DeepSpeed ZeRO checkpoint
resumes only with the number of processes that wrote it (checked here, before any model loads).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import ConfigError

MARKER = "tunekit_complete.json"
_CKPT = re.compile(r"^checkpoint-(\d+)$")
_ZERO_PART = re.compile(r"zero_pp_rank_(\d+)_mp_rank_\d+_optim_states\.pt$")


def write_complete_marker(folder: Path, step: int) -> None:
    files = {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MARKER}
    tmp = folder / (MARKER + ".tmp")
    tmp.write_text(json.dumps({"step": step, "files": files}, indent=1), encoding="utf-8")
    tmp.replace(folder / MARKER)


def is_complete(folder: Path) -> bool:
    marker = folder / MARKER
    if not marker.is_file():
        return False
    try:
        files = json.loads(marker.read_text(encoding="utf-8"))["files"]
    except (json.JSONDecodeError, KeyError):
        return False
    return all((folder / name).is_file() and (folder / name).stat().st_size == size for name, size in files.items())


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _CKPT.match(p.name))]
    return [p for _, p in sorted(found)]


def resolve_resume(output_dir: str | Path, resume, deepspeed: bool | None = None) -> str | None:
    """``true`` → newest complete checkpoint; a path → that checkpoint, if complete and resumable by this run's
    engine (``deepspeed``: whether it uses DeepSpeed) and number of processes (:func:`check_resume_setup`)."""
    if resume in (None, False, "false", "False"):
        return None
    if resume is True or str(resume).lower() == "true":
        ckpts = list_checkpoints(output_dir)
        complete = [p for p in ckpts if is_complete(p)]
        if not complete:
            torn = f" ({', '.join(p.name for p in ckpts)} {'is' if len(ckpts) == 1 else 'are'} incomplete)" if ckpts else ""
            raise ConfigError(f"resume_from_checkpoint: true found no complete checkpoint in {output_dir}{torn}. "
                              f"Remove resume_from_checkpoint to start from scratch.")
        skipped = [p.name for p in ckpts if p not in complete and ckpts.index(p) > ckpts.index(complete[-1])]
        if skipped:
            print(f"resume: skipping incomplete {', '.join(skipped)} (interrupted while saving); using {complete[-1].name}")
        check_resume_setup(complete[-1], deepspeed)
        return str(complete[-1])
    path = Path(str(resume))
    if not (path / "trainer_state.json").is_file():
        raise ConfigError(f"resume_from_checkpoint {path} is not a checkpoint folder (no trainer_state.json).")
    if not is_complete(path):
        others = [p.name for p in list_checkpoints(path.parent) if is_complete(p)]
        raise ConfigError(f"checkpoint {path} is incomplete (no valid {MARKER}; the run was probably killed while saving)."
                          + (f" Complete ones: {', '.join(others)}." if others else ""))
    check_resume_setup(path, deepspeed)
    return str(path)


def is_deepspeed_checkpoint(folder: Path) -> bool:
    return (folder / "latest").is_file()  # names the global_step* folder of DeepSpeed's files


def zero_world_size(folder: Path) -> int | None:
    """Processes that wrote a DeepSpeed ZeRO checkpoint (one optimizer-state partition each), None if it is not one."""
    if not is_deepspeed_checkpoint(folder):
        return None
    tag = (folder / "latest").read_text(encoding="utf-8").strip()
    parts = (_ZERO_PART.search(p.name) for p in (folder / tag).glob("*optim_states.pt"))
    return len({int(m.group(1)) for m in parts if m}) or None


def check_resume_setup(folder: Path, deepspeed: bool | None = None) -> None:
    """Refuse, before any model loads, what transformers/DeepSpeed cannot resume exactly: another engine (a DeepSpeed
    checkpoint without deepspeed would silently restart the optimizer), and a ZeRO checkpoint with another number
    of processes. DDP checkpoints resume with any number of processes. ``deepspeed`` None: engine not checked."""
    import os

    from .launcher import under_launcher

    weights = "adapter_name_or_path" if (folder / "adapter_config.json").is_file() else "model_name_or_path"
    fresh = (f"or start a new run from its weights ({weights}: {folder}, without resume_from_checkpoint; the optimizer "
             f"state and the learning-rate schedule then start afresh)")
    if deepspeed is not None and deepspeed != is_deepspeed_checkpoint(folder):
        if deepspeed:
            raise ConfigError(f"checkpoint {folder} was written without DeepSpeed, which cannot load its optimizer state. "
                              f"Resume without deepspeed, {fresh}.")
        raise ConfigError(f"checkpoint {folder} was written by DeepSpeed (its optimizer state is in DeepSpeed's "
                          f"global_step* files) and this run has no deepspeed: transformers would restart the optimizer "
                          f"without a word. Resume with the same deepspeed setting, {fresh}.")
    written = zero_world_size(folder)
    current = int(os.environ.get("WORLD_SIZE", "1") or 1) if under_launcher() else 1
    if written is None or written == current:
        return
    raise ConfigError(
        f"checkpoint {folder} is a DeepSpeed ZeRO checkpoint written by {_processes(written)}, and this run has "
        f"{_processes(current)}: ZeRO splits the optimizer state between the processes and DeepSpeed cannot split it "
        f"again for another number. Resume with {_processes(written)} (NPROC_PER_NODE x NNODES = {written}), {fresh}. "
        f"DDP checkpoints (no deepspeed) resume with any number of processes."
    )


def _processes(n: int) -> str:
    return f"{n} process" if n == 1 else f"{n} processes"
