"""Checkpoints that cannot lose a run.

- A checkpoint counts only once its completion marker exists. The trainer writes ``checkpoint-N/``; then rank 0
  copies the run's ``tunekit_config.yaml`` into it and writes ``tunekit_complete.json`` (every file's size and
  xxh3-64 checksum, the number of processes) atomically. Resume checks sizes and checksums, so a torn, truncated
  or zeroed file is never resumed: ``true``/``auto`` fall back to the previous good checkpoint and say so.
- Rotation (``save_total_limit``) is tunekit's, not the Trainer's: it runs only after the new checkpoint is marked
  complete, and an old checkpoint is first renamed to ``.deleting-checkpoint-N`` (atomic), then deleted, so a kill
  at any moment leaves at least one complete checkpoint (:func:`rotate_checkpoints`).
- Resume refuses a checkpoint whose run had other training options (:func:`training_differences`), a finished run
  is never trained again (:func:`plan_resume` says so and keeps its results), and ``resume_from_checkpoint: auto``
  resumes when there is a good checkpoint and starts fresh otherwise.
- A DeepSpeed ZeRO checkpoint resumes only with the number of processes that wrote it (:func:`check_resume_setup`).
- Disk full while saving: the partial checkpoint is removed and the error names the intact one (:func:`disk_full_error`).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..env import env_world_size
from ..errors import ConfigError, EnvironmentProblem
from ..model.pickles import check_resume_pickles

MARKER = "tunekit_complete.json"
RUN_CONFIG = "tunekit_config.yaml"  # = tunekit.config.RESOLVED_CONFIG_NAME (not imported: this module stays light)
RESULTS = "all_results.json"
TRASH_PREFIX = ".deleting-"
HASH = "xxh3_64"  # xxhash (a datasets dependency): ~1 GB/s, about 1/15 of torch.save's time for the same bytes
_CHUNK = 1 << 24
_CKPT = re.compile(r"^checkpoint-(\d+)$")
_ZERO_PART = re.compile(r"zero_pp_rank_(\d+)_mp_rank_\d+_optim_states\.pt$")


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


def checkpoint_problem(folder: Path, verify: bool = True) -> str | None:
    """Why ``folder`` cannot be resumed (None: it can). ``verify``: also compare the checksums (reads every file)."""
    folder = Path(folder)
    if not (folder / MARKER).is_file():
        return f"it has no {MARKER} (the run was probably killed while saving it)"
    data = _marker(folder)
    if data is None:
        return f"its {MARKER} is unreadable"
    entries = {}
    for name, entry in data["files"].items():  # markers of tunekit < 0.2 hold sizes only
        size, digest = (entry, None) if isinstance(entry, int) else (entry.get("size"), entry.get(HASH))
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, {size} when it was saved"
        entries[name] = (path, digest)
    if verify:
        for name, (path, digest) in entries.items():
            if digest is not None and file_checksum(path) != digest:
                return f"{name} does not match its checksum in {MARKER} (its content changed after the save)"
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


# ------------------------------------------------------------------ which options change training
# Options that do not change what training computes: they may differ between a checkpoint's run and the run that
# resumes it. The three batch options are compared as one product (see training_differences).
_NOT_TRAINING_GROUPS = ("infer", "export", "logging")
_NOT_TRAINING = {
    # where and how often things are written
    "output_dir",
    "overwrite_output_dir",
    "save_strategy",
    "save_steps",
    "save_total_limit",
    "save_only_model",
    "resume_from_checkpoint",
    # evaluation and prediction (the evaluation set is not trained on; val_size, which takes it from the training
    # data, is compared)
    "do_eval",
    "do_predict",
    "eval_strategy",
    "eval_steps",
    "per_device_eval_batch_size",
    "eval_dataset",
    "load_best_model_at_end",
    "metric_for_best_model",
    # speed and memory only: same losses
    "gradient_checkpointing",
    "disable_gradient_checkpointing",
    "torch_compile",
    "trained_tokens_loss",
    "group_within_step",
    "enable_liger_kernel",
    "use_unsloth",
    "flash_attn",
    "low_cpu_mem_usage",
    "auto_fit",
    "elementwise_recompute",
    "gradient_checkpointing_layers",
    "dataloader_num_workers",
    "dataloader_pin_memory",
    "ddp_timeout",
    "ddp_find_unused_parameters",
    "ddp_backend",
    "include_num_input_tokens_seen",
    "preprocessing_num_workers",
    "preprocessing_batch_size",
    "overwrite_cache",
    "tokenized_path",
    "cache_dir",
    "print_param_status",
}
_BATCH = ("per_device_train_batch_size", "gradient_accumulation_steps")


def _not_training() -> set[str]:
    from ..config.options import GROUPS

    names = set(_NOT_TRAINING)
    for group in GROUPS:
        if group.GROUP in _NOT_TRAINING_GROUPS:
            names |= set(group.model_fields)
    return names


def saved_run_config(folder: Path) -> tuple[dict | None, Path | None]:
    """The resolved config a checkpoint's run wrote: the copy inside it, else the one next to it."""
    import yaml

    for path in (Path(folder) / RUN_CONFIG, Path(folder).parent / RUN_CONFIG):
        if path.is_file():
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(data, dict):
                return data, path
    return None, None


def training_differences(
    saved: dict, current: dict, saved_world: int | None = None, current_world: int = 1
) -> list[str]:
    """``option: saved there, current here`` for every option that changes training. Options only one side knows
    (another tunekit version) are skipped. The global batch (micro-batch x accumulation x processes) is compared
    as one number when the saved run's process count is known: 2 x 1 x 2 processes trains what 2 x 2 x 1 does."""
    ignore = _not_training()
    if saved.get("max_steps", -1) > 0 and current.get("max_steps", -1) > 0:
        ignore.add("num_train_epochs")  # max_steps wins over epochs in both runs
    batch_known = saved_world is not None and all(k in saved and k in current for k in _BATCH)
    if batch_known:
        ignore |= set(_BATCH)
    out = [
        f"{key}: {saved[key]!r} there, {current[key]!r} here"
        for key in current
        if key in saved and key not in ignore and not same_value(saved[key], current[key])
    ]
    if batch_known:
        there = saved[_BATCH[0]] * saved[_BATCH[1]] * saved_world
        here = current[_BATCH[0]] * current[_BATCH[1]] * current_world
        if there != here:
            out.append(
                f"global batch (per_device_train_batch_size x gradient_accumulation_steps x processes): "
                f"{saved[_BATCH[0]]} x {saved[_BATCH[1]]} x {saved_world} = {there} there, "
                f"{current[_BATCH[0]]} x {current[_BATCH[1]]} x {current_world} = {here} here"
            )
    return out


def same_value(a: Any, b: Any) -> bool:
    """Equal, or text naming the same local files or folders (``tiny`` and ``/work/tiny``, a link and its
    target; comma-separated lists item by item): a path is compared as a path, a hub id as text."""
    if a == b:
        return True
    if not (isinstance(a, str) and isinstance(b, str)):
        return False
    items_a, items_b = [x.strip() for x in a.split(",")], [x.strip() for x in b.split(",")]
    if len(items_a) != len(items_b):
        return False
    try:
        return all(
            x == y or (os.path.exists(x) and os.path.exists(y) and os.path.samefile(x, y))
            for x, y in zip(items_a, items_b)
        )
    except OSError:
        return False


def check_same_training(folder: Path, current: dict | None, current_world: int = 1, what: str | None = None) -> None:
    """Refuse to continue ``folder``'s run (a checkpoint, or a run folder) under options that change training."""
    if current is None:
        return
    saved, path = saved_run_config(folder)
    if saved is None:
        return  # written by another tool (or tunekit < 0.2): nothing to compare with
    diffs = training_differences(saved, current, marker_world_size(folder) if what is None else None, current_world)
    if diffs:
        raise ConfigError(
            f"{what or f'checkpoint {folder}'} belongs to a run with other training options ({path}): "
            + "; ".join(diffs)
            + ". Continuing it with this config would mix two runs. Use that run's values, or start a new run "
            "(another output_dir, or overwrite_output_dir: true without resume_from_checkpoint)."
        )


# ------------------------------------------------------------------ what to resume
def finished_results(output_dir: str | Path) -> dict | None:
    """The results of a run that trained to its end in ``output_dir`` (None: not finished, or no run there)."""
    path = Path(output_dir) / RESULTS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and "train_runtime" in data and not data.get("stopped_early"):
        return data
    return None


def _choose(output_dir: str | Path, verify: bool = True) -> tuple[Path | None, list[str]]:
    """The newest resumable checkpoint, and a line for each newer one passed over (torn or damaged)."""
    passed = []
    for path in reversed(list_checkpoints(output_dir)):
        problem = checkpoint_problem(path, verify)
        if problem is None:
            return path, passed
        passed.append(f"{path.name} ({problem})")
    return None, passed


def _trained_step(folder: Path) -> int:
    try:
        return int(json.loads((Path(folder) / "trainer_state.json").read_text(encoding="utf-8"))["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return checkpoint_step(folder)


@dataclass
class ResumePlan:
    """What ``run_train`` does with ``output_dir``: resume ``checkpoint`` (at ``step``), start fresh, or nothing
    (``finished``: the results of a run that already ended). ``clear``: folders/files to delete once the run's
    inputs are validated, just before training (never before: a failing run must leave the folder as it was)."""

    checkpoint: str | None = None
    step: int = 0
    finished: dict | None = None
    clear: list[Path] = field(default_factory=list)
    clear_note: str = ""
    notes: list[str] = field(default_factory=list)


def _superseded(output_dir, after: int) -> list[Path]:
    return [p for p in list_checkpoints(output_dir) if checkpoint_step(p) > after]


def plan_resume(
    output_dir: str | Path,
    resume,
    deepspeed: bool | None = None,
    current: dict | None = None,
    world_size: int = 1,
    overwrite: bool = False,
    check_finished: bool = True,
) -> ResumePlan:
    """Decide before anything loads. ``resume``: None/False (fresh), True (newest good checkpoint), ``"auto"``
    (newest good checkpoint, else fresh), or a checkpoint path. ``current``: this run's resolved options
    (``config_to_dict``), compared with the checkpoint's; ``overwrite``: ``overwrite_output_dir``; ``check_finished``:
    a run that already ended is not resumed (``finished``)."""
    out = Path(output_dir)
    auto = isinstance(resume, str) and resume.lower() == "auto"
    if resume in (None, False) or (isinstance(resume, str) and resume.lower() in ("false", "")):
        plan = ResumePlan()
        if overwrite:  # a new run: the old run's checkpoints and results are not its own
            plan.clear = (
                list_checkpoints(out)
                + [p for p in out.glob("*_results.json")]
                + [p for p in (out / "trainer_state.json",) if p.is_file()]
            )
            plan.clear_note = (
                f"overwrite_output_dir: deleting the previous run's {', '.join(p.name for p in plan.clear)} in {out}"
            )
        return plan
    if resume is True or auto or str(resume).lower() == "true":
        done = finished_results(out) if check_finished else None
        if done is not None:
            check_same_training(out, current, world_size, what=f"the finished run in {out}")
            return ResumePlan(
                finished=done,
                notes=[
                    f"resume: the run in {out} already finished (step {done.get('total_steps', '?')}, train_loss "
                    f"{done.get('train_loss', float('nan')):.4f}); nothing to train, its results are kept. To train again, "
                    f"use another output_dir or overwrite_output_dir: true without resume_from_checkpoint."
                ],
            )
        chosen, passed = _choose(out)
        if chosen is None and auto:
            if (out / RUN_CONFIG).is_file():
                check_same_training(out, current, world_size, what=f"the run in {out}")
            elif out.is_dir() and any(not p.name.startswith(TRASH_PREFIX) for p in out.iterdir()):
                shown = ", ".join(sorted(p.name for p in out.iterdir())[:5])
                raise ConfigError(
                    f"resume_from_checkpoint: auto found no checkpoint and no {RUN_CONFIG} in output_dir "
                    f"{out}, which is not empty ({shown}): it is not a tunekit run's folder. Choose a new "
                    f"output_dir, or set overwrite_output_dir: true to write into it."
                )
            plan = ResumePlan(clear=list_checkpoints(out))
            plan.clear_note = f"deleting the incomplete {', '.join(p.name for p in plan.clear)}"
            plan.notes.append(
                f"resume_from_checkpoint: auto: no complete checkpoint in {out}"
                + (f" ({'; '.join(passed)})" if passed else "")
                + ": starting from scratch"
            )
            return plan
        if chosen is None:
            torn = f" ({'; '.join(passed)})" if passed else ""
            raise ConfigError(
                f"resume_from_checkpoint: true found no complete checkpoint in {out}{torn}. "
                f"Remove resume_from_checkpoint to start from scratch, or use resume_from_checkpoint: auto."
            )
        plan = ResumePlan(
            checkpoint=str(chosen), step=_trained_step(chosen), clear=_superseded(out, checkpoint_step(chosen))
        )
        if passed:
            plan.notes.append(
                f"resume: not using {'; '.join(passed)}; using {chosen.name}, the newest good checkpoint"
            )
    else:
        path = Path(str(resume))
        if not (path / "trainer_state.json").is_file():
            raise ConfigError(f"resume_from_checkpoint {path} is not a checkpoint folder (no trainer_state.json).")
        problem = checkpoint_problem(path)
        if problem is not None:
            good, _ = _choose(path.parent)
            raise ConfigError(
                f"checkpoint {path} is incomplete or damaged: {problem}."
                + (f" The newest good one is {good}." if good is not None else "")
            )
        done = finished_results(path.parent) if check_finished and path.parent.resolve() == out.resolve() else None
        if done is not None:
            check_same_training(path, current, world_size)
            return ResumePlan(
                finished=done,
                notes=[
                    f"resume: the run in {out} already finished (step {done.get('total_steps', '?')}); resuming {path.name} "
                    f"with the same options would train the same steps again. Nothing to do, its results are kept."
                ],
            )
        same_dir = path.parent.resolve() == out.resolve()
        plan = ResumePlan(
            checkpoint=str(path),
            step=_trained_step(path),
            clear=_superseded(out, checkpoint_step(path)) if same_dir else [],
        )
    check_resume_setup(Path(plan.checkpoint), deepspeed)
    check_resume_pickles(Path(plan.checkpoint))  # a crafted optimizer.pt ...: one line naming it
    check_same_training(Path(plan.checkpoint), current, world_size)
    if plan.clear:
        plan.clear_note = (
            f"resume: deleting {', '.join(p.name for p in plan.clear)} (after {Path(plan.checkpoint).name}, "
            f"which this run continues; those steps are trained again)"
        )
    return plan


def resolve_resume(output_dir: str | Path, resume, deepspeed: bool | None = None) -> str | None:
    """``true`` → newest good checkpoint; ``auto`` → the same, or None when there is none; a path → that checkpoint,
    if complete and resumable by this run's engine (``deepspeed``: whether it uses DeepSpeed) and number of
    processes (:func:`check_resume_setup`). Options are not compared here (:func:`plan_resume` does)."""
    plan = plan_resume(output_dir, resume, deepspeed, check_finished=False)
    for note in plan.notes:
        print(note, flush=True)
    return plan.checkpoint


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
    good, _ = _choose(out, verify=False)
    intact = f"{good.name} is intact" if good is not None else "no earlier checkpoint exists"
    what = f"the final model to {out}" if final else f"checkpoint-{step} to {partial}"
    return EnvironmentProblem(
        f"no space left on device while saving {what}; {intact}. Free some space (or set "
        f"save_total_limit), then continue with resume_from_checkpoint: auto."
    )


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

    from .engines.launcher import under_launcher

    weights = "adapter_name_or_path" if (folder / "adapter_config.json").is_file() else "model_name_or_path"
    fresh = (
        f"or start a new run from its weights ({weights}: {folder}, without resume_from_checkpoint; the optimizer "
        f"state and the learning-rate schedule then start afresh)"
    )
    if deepspeed is not None and deepspeed != is_deepspeed_checkpoint(folder):
        if deepspeed:
            raise ConfigError(
                f"checkpoint {folder} was written without DeepSpeed, which cannot load its optimizer state. "
                f"Resume without deepspeed, {fresh}."
            )
        raise ConfigError(
            f"checkpoint {folder} was written by DeepSpeed (its optimizer state is in DeepSpeed's "
            f"global_step* files) and this run has no deepspeed: transformers would restart the optimizer "
            f"without a word. Resume with the same deepspeed setting, {fresh}."
        )
    written = zero_world_size(folder)
    current = (env_world_size() or 1) if under_launcher() else 1
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
