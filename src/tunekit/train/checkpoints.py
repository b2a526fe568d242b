"""Checkpoints that are never torn: a checkpoint counts only once its completion marker exists.

The trainer writes ``checkpoint-N/``; after the save returns, rank 0 writes ``tunekit_complete.json``
(file names and sizes) atomically. ``resume_from_checkpoint: true`` takes the newest *complete*
checkpoint, so a run killed while saving resumes from the previous one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import ConfigError

MARKER = "tunekit_complete.json"
_CKPT = re.compile(r"^checkpoint-(\d+)$")


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


def resolve_resume(output_dir: str | Path, resume) -> str | None:
    """``true`` → newest complete checkpoint; a path → that checkpoint, if complete."""
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
        return str(complete[-1])
    path = Path(str(resume))
    if not (path / "trainer_state.json").is_file():
        raise ConfigError(f"resume_from_checkpoint {path} is not a checkpoint folder (no trainer_state.json).")
    if not is_complete(path):
        others = [p.name for p in list_checkpoints(path.parent) if is_complete(p)]
        raise ConfigError(f"checkpoint {path} is incomplete (no valid {MARKER}; the run was probably killed while saving)."
                          + (f" Complete ones: {', '.join(others)}." if others else ""))
    return str(path)
