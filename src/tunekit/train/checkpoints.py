"""Checkpoints that cannot lose a run.

- A checkpoint counts only once its completion marker exists. The trainer writes ``checkpoint-N/``; then rank 0
  copies the run's ``tunekit_config.yaml`` into it and writes ``tunekit_complete.json`` (every file's size and
  xxh3-64 checksum, the number of processes) atomically. Resume checks sizes and checksums, so a torn, truncated
  or zeroed file is never resumed: ``true``/``auto`` fall back to the previous good checkpoint and say so.
- Rotation (``save_total_limit``) is tunekit's, not the Trainer's: it runs only after the new checkpoint is marked
  complete, and an old checkpoint is first renamed to ``.deleting-checkpoint-N`` (atomic), then deleted, so a kill
  at any moment leaves at least one complete checkpoint (:func:`rotate_checkpoints`).
- Whether and where a run resumes (other training options refused, a finished run never trained again, ZeRO
  checkpoints only with the number of processes that wrote them): :mod:`tunekit.train.resume`.
- Disk full while saving: the partial checkpoint is removed and the error names the intact one
  (:func:`disk_full_error`).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path

from ..config.problems import Said
from ..errors import EnvironmentProblem

MARKER = "tunekit_complete.json"
RUN_CONFIG = "tunekit_config.yaml"  # = tunekit.config.RESOLVED_CONFIG_NAME (not imported: this module stays light)
RESULTS = "all_results.json"
TRASH_PREFIX = ".deleting-"
HASH = "xxh3_64"  # xxhash (a datasets dependency): ~1 GB/s, about 1/15 of torch.save's time for the same bytes
_CHUNK = 1 << 24
_CKPT = re.compile(r"^checkpoint-(\d+)$")


# ------------------------------------------------------------------ the completion marker
def file_checksum(path: Path) -> str:
    import xxhash

    digest = xxhash.xxh3_64()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_complete_marker(folder: Path, step: int, world_size: int = 1) -> None:
    """Record every file's size and checksum, then publish the marker atomically (written, fsynced, renamed)."""
    folder = Path(folder)
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name not in (MARKER, MARKER + ".tmp"):
            files[str(path.relative_to(folder))] = {"size": path.stat().st_size, HASH: file_checksum(path)}
    tmp = folder / (MARKER + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"step": step, "world_size": world_size, "hash": HASH, "files": files}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(folder / MARKER)


def _marker(folder: Path) -> dict | None:
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) and isinstance(data.get("files"), dict) else None
    except (OSError, ValueError):
        return None


def checkpoint_problem(folder: Path, verify: bool = True) -> Said | None:
    """Why ``folder`` cannot be resumed (None: it can), keyed (the board says it in Chinese). ``verify``: also compare
    the checksums (reads every file)."""
    folder = Path(folder)
    if not (folder / MARKER).is_file():
        return Said("part_ckpt_no_marker", file=MARKER)
    data = _marker(folder)
    if data is None:
        return Said("part_ckpt_marker_unreadable", file=MARKER)
    entries = {}
    for name, entry in data["files"].items():  # markers of tunekit < 0.2 hold sizes only
        size, digest = (entry, None) if isinstance(entry, int) else (entry.get("size"), entry.get(HASH))
        path = folder / name
        if not path.is_file():
            return Said("part_ckpt_file_missing", name=name)
        if path.stat().st_size != size:
            saved = size if isinstance(size, (int, float)) else str(size)  # a hand-edited marker: shown as written
            return Said("part_ckpt_file_size", name=name, size=path.stat().st_size, saved=saved)
        entries[name] = (path, digest)
    if verify:
        for name, (path, digest) in entries.items():
            if digest is not None and file_checksum(path) != digest:
                return Said("part_ckpt_checksum", name=name, file=MARKER)
    return None


def is_complete(folder: Path, verify: bool = True) -> bool:
    return checkpoint_problem(folder, verify) is None


def marker_world_size(folder: Path) -> int | None:
    data = _marker(Path(folder)) or {}
    return data.get("world_size") if isinstance(data.get("world_size"), int) else None


# ------------------------------------------------------------------ listing, rotation, clearing
def checkpoint_step(folder: Path) -> int:
    m = _CKPT.match(Path(folder).name)
    return int(m.group(1)) if m else -1


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _CKPT.match(p.name))]
    return [p for _, p in sorted(found)]


def remove_folder(folder: Path) -> None:
    """Rename (atomic: a killed deletion never leaves a half-deleted ``checkpoint-N``), then delete."""
    folder = Path(folder)
    trash = folder.with_name(TRASH_PREFIX + folder.name)
    if trash.exists():
        shutil.rmtree(trash, ignore_errors=True)
    folder.rename(trash)
    shutil.rmtree(trash, ignore_errors=True)


def purge_trash(output_dir: str | Path) -> None:
    """Finish deletions a killed run left behind (``.deleting-checkpoint-N``)."""
    root = Path(output_dir)
    if root.is_dir():
        for path in root.iterdir():
            if path.is_dir() and path.name.startswith(TRASH_PREFIX):
                shutil.rmtree(path, ignore_errors=True)


def rotate_checkpoints(
    output_dir: str | Path, limit: int | None, best: str | None = None, keep_newest: bool = True
) -> list[str]:
    """Keep the newest ``limit`` complete checkpoints (and ``best``); delete older ones, complete or torn.

    Called after the newest checkpoint is marked complete. Checkpoints newer than the newest complete one are not
    touched, and the newest complete one is kept (``keep_newest=False``, at the end of a finished run: only
    ``best`` is). Returns the names deleted. (Hugging Face's own rotation runs inside ``_save_checkpoint``, before
    any callback could mark the new checkpoint, so tunekit passes ``save_total_limit=None`` to the Trainer and
    rotates here.)
    """
    if not limit or limit <= 0:
        return []
    ckpts = list_checkpoints(output_dir)
    complete = [p for p in ckpts if is_complete(p, verify=False)]
    if not complete:
        return []
    newest = checkpoint_step(complete[-1])
    best_folder = [p for p in complete if best and p.resolve() == Path(best).resolve()]
    if keep_newest or not best_folder:  # Hugging Face's count: the newest and the best, then newest first to `limit`
        keep = {complete[-1], *best_folder}
        for path in reversed(complete):
            if len(keep) >= limit:
                break
            keep.add(path)
    else:
        keep = set(best_folder)
    removed = []
    for path in ckpts:
        if path not in keep and checkpoint_step(path) <= newest:
            remove_folder(path)
            removed.append(path.name)
    return removed


def newest_complete(output_dir: str | Path, verify: bool = True) -> tuple[Path | None, list[Said]]:
    """The newest resumable checkpoint, and a line for each newer one passed over (torn or damaged; keyed)."""
    passed = []
    for path in reversed(list_checkpoints(output_dir)):
        problem = checkpoint_problem(path, verify)
        if problem is None:
            return path, passed
        passed.append(Said("part_ckpt_passed", name=path.name, problem=problem))
    return None, passed


def apply_clear(paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir():
            remove_folder(path)
        elif path.exists():
            path.unlink()


# ------------------------------------------------------------------ disk full
_LOW_SPACE = 64 << 20


def _disk_full(exc: BaseException, where: Path) -> bool:
    seen, chain = set(), exc
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        if isinstance(chain, OSError) and chain.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(chain)
        if "No space left on device" in text or "os error 28" in text:
            return True
        chain = chain.__cause__ or chain.__context__
    # torch.save's writer reports a full disk only as "[enforce fail at inline_container.cc] unexpected pos" or
    # "file write failed": look at the free space instead.
    try:
        return shutil.disk_usage(where).free < _LOW_SPACE
    except OSError:
        return False


def disk_full_error(
    exc: BaseException, output_dir: str | Path, step: int, final: bool = False
) -> EnvironmentProblem | None:
    """The error to raise when ``exc`` (raised while training or saving) means the disk is full, None otherwise.
    Removes the partial ``checkpoint-{step}`` (no marker) to free the space; the complete ones are kept."""
    out = Path(output_dir)
    if not _disk_full(exc, out if out.is_dir() else out.parent):
        return None
    partial = out / f"checkpoint-{step}"
    if partial.is_dir() and not (partial / MARKER).is_file():
        remove_folder(partial)
    good, _ = newest_complete(out, verify=False)
    intact = Said("part_ckpt_intact", name=good.name) if good is not None else Said("part_no_earlier_ckpt")
    what = Said("part_final_model_to", path=str(out)) if final else Said("part_ckpt_to", step=step, path=str(partial))
    return EnvironmentProblem(Said("ckpt_disk_full", what=what, intact=intact))
