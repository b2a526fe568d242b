"""Trainer callbacks: the JSONL log, the terminal progress bar, complete-checkpoint markers, and a
graceful stop on SIGINT/SIGTERM (save a checkpoint, then end). Only rank 0 writes or prints."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import time
from pathlib import Path

from transformers import TrainerCallback

from ..env import env_rank
from ..model.moe import take_router_aux
from .checkpoints import RUN_CONFIG, rotate_checkpoints, write_complete_marker
from .engines.launcher import STOP_FILE_ENV
from .plotting import LOG_NAME


def _strict_json(row: dict) -> dict:
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


class JsonlLogCallback(TrainerCallback):
    """``trainer_log.jsonl``: one JSON object per logging step (and per evaluation).

    Training lines: step, total_steps, epoch, loss, lr, grad_norm, num_input_tokens_seen, elapsed_s, eta_s.
    Strict JSON: a non-finite number (inf/nan loss or grad_norm) is written as null (train/finite_guard.py then stops
    the run at that step).
    Eval lines: step, total_steps, epoch, eval_loss (+ other eval metrics). On resume, lines after the
    resumed step are removed first, so the file always describes one consistent history.
    """

    def __init__(self, output_dir: str):
        self.path = Path(output_dir) / LOG_NAME
        self.start = time.time()
        self.start_step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.time()
        self.start_step = state.global_step
        if not state.is_world_process_zero:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keep = []
        if state.global_step > 0 and self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    if json.loads(line).get("step", 0) <= state.global_step:
                        keep.append(line)
                except json.JSONDecodeError:
                    pass
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in keep), encoding="utf-8")
        tmp.replace(self.path)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        elapsed = time.time() - self.start
        done = state.global_step - self.start_step
        eta = elapsed / done * (state.max_steps - state.global_step) if done > 0 else None
        row = {"step": state.global_step, "total_steps": state.max_steps, "epoch": round(state.epoch or 0.0, 4)}
        if "loss" in logs:
            row.update(loss=logs["loss"], lr=logs.get("learning_rate"), grad_norm=logs.get("grad_norm"))
            row.update(take_router_aux(kwargs.get("model")))  # moe_aux_loss_coef: moe/aux_loss (model/moe.py)
        elif any(k.startswith("eval_") for k in logs):
            row.update({k: v for k, v in logs.items() if k.startswith("eval_")})
        else:
            return  # the end-of-training summary goes to all_results.json
        for key, value in logs.items():  # stage metrics (rewards/..., logps/...)
            if "/" in key and key not in row:
                row[key] = value
        row.update(
            num_input_tokens_seen=state.num_input_tokens_seen,
            elapsed_s=round(elapsed, 2),
            eta_s=round(eta, 2) if eta is not None else None,
        )
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(_strict_json(row), allow_nan=False) + "\n")


class RichProgressCallback(TrainerCallback):
    """A progress bar with step/total, loss and ETA (replaces the tqdm bar and the dict printer)."""

    def __init__(self):
        self.progress = None
        self.task = None
        self.last = {}

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            refresh_per_second=4,
        )
        self.progress.start()
        self.task = self.progress.add_task("train", total=state.max_steps, completed=state.global_step, info="")

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.progress is None or not logs:
            return
        if "loss" in logs:
            self.last = logs
            info = f"loss {logs['loss']:.4f}  lr {logs.get('learning_rate', 0):.2e}"
            self.progress.update(self.task, info=info)
            self.progress.console.print(
                f"step {state.global_step}/{state.max_steps}  epoch {state.epoch or 0:.2f}  loss {logs['loss']:.4f}  "
                f"grad_norm {logs.get('grad_norm', float('nan')):.3f}  lr {logs.get('learning_rate', 0):.3e}",
                highlight=False,
            )
        elif "eval_loss" in logs:
            self.progress.console.print(
                f"eval at step {state.global_step}: eval_loss {logs['eval_loss']:.4f}", highlight=False
            )

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def wait_for_every_rank() -> None:
    """A barrier over the process group when one is running (a no-op in a single process)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


class CompleteCheckpointCallback(TrainerCallback):
    """Marks ``checkpoint-N`` complete once every file is written (with the run's ``tunekit_config.yaml`` copied
    in, so resume can compare options), then rotates: ``save_total_limit`` is applied here, after the marker, and
    the Trainer gets ``save_total_limit=None`` (its own rotation deletes old checkpoints before any callback runs).
    Resume ignores unmarked (torn) checkpoints."""

    def __init__(self, save_total_limit: int | None = None):
        self.save_total_limit = save_total_limit

    def on_save(self, args, state, control, **kwargs):
        # Every rank writes its own files (rng_state_N.pth, FSDP/ZeRO shards) and may still be writing them when
        # rank 0 gets here: wait for all of them before rank 0 records sizes and checksums.
        wait_for_every_rank()
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                config = Path(args.output_dir) / RUN_CONFIG
                if config.is_file():
                    shutil.copy(config, folder / RUN_CONFIG)  # with its mode: 0600 when it holds a secret reference
                write_complete_marker(folder, state.global_step, args.world_size)
                rotate_checkpoints(args.output_dir, self.save_total_limit, state.best_model_checkpoint)

    def on_train_end(self, args, state, control, **kwargs):
        # Hugging Face's rule for save_total_limit 1 with a best checkpoint: at the end keep only the best one
        # (only when training reached its end: a stopped run keeps its newest checkpoint to resume from).
        if (
            state.is_world_process_zero
            and self.save_total_limit == 1
            and state.best_model_checkpoint
            and state.global_step >= state.max_steps
        ):
            rotate_checkpoints(args.output_dir, 1, state.best_model_checkpoint, keep_newest=False)


def any_rank(flag: bool, device) -> bool:
    """``flag`` of any rank, agreed by all (one one-element all-reduce): ranks that got a signal either side of a step
    boundary stop after the same step, so they meet in the checkpoint's collectives instead of waiting for each other
    until the launcher kills them. One process: ``flag``."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    agreed = torch.tensor([int(flag)], device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
    return bool(agreed.item())


class GracefulStopCallback(TrainerCallback):
    """First SIGINT/SIGTERM (or, under Ray Train, the driver's stop file): finish the current step, save a checkpoint,
    stop. A second SIGINT aborts."""

    def __init__(self):
        self.requested: int | None = None
        self._previous = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread
                self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame):
        if self.requested is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = signum
        if env_rank() == 0:
            print(
                f"\nreceived {signal.Signals(signum).name}: saving a checkpoint after this step, then stopping "
                f"(press Ctrl+C again to abort without saving)",
                flush=True,
            )

    def on_step_end(self, args, state, control, **kwargs):
        asked = os.environ.get(STOP_FILE_ENV)  # a launcher that cannot signal the ranks (Ray Train) writes this file
        if any_rank(
            self.requested is not None or bool(asked and env_rank() == 0 and os.path.exists(asked)), args.device
        ):
            control.should_save = True
            control.should_training_stop = True
