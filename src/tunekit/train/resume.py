"""Whether and where a run resumes, decided before anything loads (:func:`plan_resume`).

- Resume refuses a checkpoint whose run had other training options (:func:`training_differences`), a finished run
  is never trained again (:func:`plan_resume` says so and keeps its results), and ``resume_from_checkpoint: auto``
  resumes when there is a good checkpoint and starts fresh otherwise.
- A DeepSpeed ZeRO checkpoint resumes only with the number of processes that wrote it (:func:`check_resume_setup`).

What makes a checkpoint good (its completion marker), rotation and clearing: :mod:`tunekit.train.checkpoints`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.options import GROUPS
from ..config.problems import Said, config_error
from ..env import env_world_size
from ..model.pickles import check_resume_pickles
from .checkpoints import (
    RESULTS,
    RUN_CONFIG,
    TRASH_PREFIX,
    checkpoint_problem,
    checkpoint_step,
    list_checkpoints,
    marker_world_size,
    newest_complete,
)
from .engines.launcher import under_launcher

_ZERO_PART = re.compile(r"zero_pp_rank_(\d+)_mp_rank_\d+_optim_states\.pt$")


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
    "use_reentrant_gc",
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
) -> list[Said]:
    """``option: saved there, current here`` (keyed: the board says it in Chinese) for every option that changes
    training. Options only one side knows (another tunekit version) are skipped. The global batch (micro-batch x
    accumulation x processes) is compared as one number when the saved run's process count is known: 2 x 1 x 2
    processes trains what 2 x 2 x 1 does."""
    ignore = _not_training()
    if saved.get("max_steps", -1) > 0 and current.get("max_steps", -1) > 0:
        ignore.add("num_train_epochs")  # max_steps wins over epochs in both runs
    batch_known = saved_world is not None and all(k in saved and k in current for k in _BATCH)
    if batch_known:
        ignore |= set(_BATCH)
    out = [
        Said("part_resume_diff", key=key, there=repr(saved[key]), here=repr(current[key]))
        for key in current
        if key in saved and key not in ignore and not same_value(saved[key], current[key])
    ]
    if batch_known:
        there = saved[_BATCH[0]] * saved[_BATCH[1]] * saved_world
        here = current[_BATCH[0]] * current[_BATCH[1]] * current_world
        if there != here:
            out.append(
                Said(
                    "part_resume_diff_batch",
                    micro=saved[_BATCH[0]],
                    accum=saved[_BATCH[1]],
                    world=saved_world,
                    there=there,
                    micro_here=current[_BATCH[0]],
                    accum_here=current[_BATCH[1]],
                    world_here=current_world,
                    here=here,
                )
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


def check_same_training(folder: Path, current: dict | None, current_world: int = 1, what: Said | None = None) -> None:
    """Refuse to continue ``folder``'s run (a checkpoint, or a run folder) under options that change training."""
    if current is None:
        return
    saved, path = saved_run_config(folder)
    if saved is None:
        return  # written by another tool (or tunekit < 0.2): nothing to compare with
    diffs = training_differences(saved, current, marker_world_size(folder) if what is None else None, current_world)
    if diffs:
        what = what or Said("part_resume_checkpoint", path=str(folder))
        raise config_error("resume_other_options", what=what, path=str(path), diffs=tuple(diffs))


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
        return _fresh_plan(out, overwrite)
    if resume is True or auto or str(resume).lower() == "true":
        plan = _newest_plan(out, auto, current, world_size, check_finished)
    else:
        plan = _named_plan(Path(str(resume)), out, current, world_size, check_finished)
    if plan.checkpoint is None:  # the run already finished, or auto found nothing to resume
        return plan
    check_resume_setup(Path(plan.checkpoint), deepspeed)
    check_resume_pickles(Path(plan.checkpoint))  # a crafted optimizer.pt ...: one line naming it
    check_same_training(Path(plan.checkpoint), current, world_size)
    if plan.clear:
        plan.clear_note = (
            f"resume: deleting {', '.join(p.name for p in plan.clear)} (after {Path(plan.checkpoint).name}, "
            f"which this run continues; those steps are trained again)"
        )
    return plan


def _fresh_plan(out: Path, overwrite: bool) -> ResumePlan:
    """No resume: with ``overwrite_output_dir``, the old run's checkpoints and results go (they are not this run's)."""
    plan = ResumePlan()
    if overwrite:
        plan.clear = (
            list_checkpoints(out)
            + list(out.glob("*_results.json"))
            + [p for p in (out / "trainer_state.json",) if p.is_file()]
        )
        plan.clear_note = (
            f"overwrite_output_dir: deleting the previous run's {', '.join(p.name for p in plan.clear)} in {out}"
        )
    return plan


def _newest_plan(out: Path, auto: bool, current: dict | None, world_size: int, check_finished: bool) -> ResumePlan:
    """``true`` / ``auto``: the newest good checkpoint in ``out`` (``auto``: else a fresh start)."""
    done = finished_results(out) if check_finished else None
    if done is not None:
        check_same_training(out, current, world_size, what=Said("part_resume_finished_run", path=str(out)))
        return ResumePlan(
            finished=done,
            notes=[
                f"resume: the run in {out} already finished (step {done.get('total_steps', '?')}, train_loss "
                f"{done.get('train_loss', float('nan')):.4f}); nothing to train, its results are kept. "
                "To train again, use another output_dir or overwrite_output_dir: true without "
                "resume_from_checkpoint."
            ],
        )
    chosen, passed = newest_complete(out)
    if chosen is None and auto:
        return _auto_fresh_plan(out, passed, current, world_size)
    if chosen is None:
        torn = Said("part_resume_torn", checkpoints=tuple(passed)) if passed else None
        raise config_error("resume_none_complete", ("resume_from_checkpoint",), path=str(out), torn=torn)
    plan = ResumePlan(
        checkpoint=str(chosen), step=_trained_step(chosen), clear=_superseded(out, checkpoint_step(chosen))
    )
    if passed:
        plan.notes.append(f"resume: not using {'; '.join(passed)}; using {chosen.name}, the newest good checkpoint")
    return plan


def _auto_fresh_plan(out: Path, passed: list[Said], current: dict | None, world_size: int) -> ResumePlan:
    """``auto`` with no complete checkpoint: start from scratch in a tunekit run's folder (or an empty one)."""
    if (out / RUN_CONFIG).is_file():
        check_same_training(out, current, world_size, what=Said("part_resume_run", path=str(out)))
    elif out.is_dir() and any(not p.name.startswith(TRASH_PREFIX) for p in out.iterdir()):
        shown = ", ".join(sorted(p.name for p in out.iterdir())[:5])
        raise config_error("resume_auto_foreign", ("output_dir",), file=RUN_CONFIG, path=str(out), shown=shown)
    plan = ResumePlan(clear=list_checkpoints(out))
    plan.clear_note = f"deleting the incomplete {', '.join(p.name for p in plan.clear)}"
    plan.notes.append(
        f"resume_from_checkpoint: auto: no complete checkpoint in {out}"
        + (f" ({'; '.join(passed)})" if passed else "")
        + ": starting from scratch"
    )
    return plan


def _named_plan(path: Path, out: Path, current: dict | None, world_size: int, check_finished: bool) -> ResumePlan:
    """A checkpoint path: that one, if complete (a run already finished in ``out`` is not trained again)."""
    if not (path / "trainer_state.json").is_file():
        raise config_error("resume_not_checkpoint", ("resume_from_checkpoint",), path=str(path))
    problem = checkpoint_problem(path)
    if problem is not None:
        good, _ = newest_complete(path.parent)
        good = Said("part_resume_good", path=str(good)) if good is not None else None
        raise config_error("resume_damaged", ("resume_from_checkpoint",), path=str(path), problem=problem, good=good)
    same_dir = path.parent.resolve() == out.resolve()
    done = finished_results(path.parent) if check_finished and same_dir else None
    if done is not None:
        check_same_training(path, current, world_size)
        return ResumePlan(
            finished=done,
            notes=[
                f"resume: the run in {out} already finished (step {done.get('total_steps', '?')}); "
                f"resuming {path.name} with the same options would train the same steps again. "
                "Nothing to do, its results are kept."
            ],
        )
    return ResumePlan(
        checkpoint=str(path),
        step=_trained_step(path),
        clear=_superseded(out, checkpoint_step(path)) if same_dir else [],
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
    weights = "adapter_name_or_path" if (folder / "adapter_config.json").is_file() else "model_name_or_path"
    fresh = Said("part_resume_fresh", option=weights, path=str(folder))
    if deepspeed is not None and deepspeed != is_deepspeed_checkpoint(folder):
        if deepspeed:
            raise config_error("resume_without_deepspeed", ("deepspeed",), path=str(folder), fresh=fresh)
        raise config_error("resume_needs_deepspeed", ("deepspeed",), path=str(folder), fresh=fresh)
    written = zero_world_size(folder)
    current = (env_world_size() or 1) if under_launcher() else 1
    if written is None or written == current:
        return
    raise config_error(
        "resume_zero_world",
        path=str(folder),
        written=_processes(written),
        current=_processes(current),
        count=written,
        fresh=fresh,
    )


def _processes(n: int) -> Said:
    return Said("part_one_process" if n == 1 else "part_processes", count=n)
