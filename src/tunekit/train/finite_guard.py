"""Stop training at the first non-finite loss, gradient or weight, and never save that step.

A learning rate that is too high, fp32 overflow or a bad sample can turn the loss into inf/NaN; Hugging Face then
keeps training (its ``logging_nan_inf_filter`` even hides NaN losses from the log), saves NaN checkpoints and exits
0. :class:`FiniteGuardCallback` raises :class:`~tunekit.errors.TrainingDiverged` instead, naming the step and the
last checkpoint that is still good. It checks, each optimizer step:

* before the optimizer step, the gradients of the trainable parameters (a NaN/inf loss makes them NaN too, so this
  also catches the loss without seeing it); skipped under fp16, where the loss scaler expects occasional inf
  gradients and skips those steps itself;
* every logged ``loss``/``grad_norm``/``eval_loss`` (the only check that sees through DeepSpeed, which keeps
  gradients in its own partitions);
* the trainable weights, at steps that are about to save a checkpoint (an update with finite gradients can still
  produce inf weights).

The exception is raised inside the training loop, before ``_maybe_log_save_evaluate`` saves the step, so the newest
complete checkpoint on disk is from before the divergence.
"""

from __future__ import annotations

import math
from pathlib import Path

from transformers import TrainerCallback

from ..errors import TrainingDiverged
from .checkpoints import is_complete, list_checkpoints

_LOGGED = ("loss", "grad_norm", "eval_loss")


def _all_finite(tensors) -> bool:
    import torch

    tensors = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]  # FSDP2 DTensors: the local shard
    tensors = [t.coalesce().values() if t.is_sparse else t for t in tensors]  # BAdam ratio mode: its stored entries
    tensors = [t.detach() for t in tensors if t is not None and t.numel()]
    if not tensors:
        return True
    # the largest magnitude of each tensor (ord=inf: max |x|, nan propagates; unlike a sum or 2-norm it cannot
    # overflow for finite values), reduced on its device without a copy; one host sync for all of them
    peaks = [torch.linalg.vector_norm(t, ord=float("inf")) for t in tensors]
    return bool(torch.isfinite(torch.stack([p.float().to(peaks[0].device) for p in peaks])).all())


class FiniteGuardCallback(TrainerCallback):
    def __init__(self, output_dir: str):
        self.output_dir = Path(output_dir)

    def _stop(self, state, step: int, what: str) -> None:

        good = [p for p in list_checkpoints(self.output_dir) if is_complete(p)]
        last = (
            f"the last good checkpoint is {good[-1]} (resume_from_checkpoint: {good[-1]})"
            if good
            else f"no checkpoint was saved before it in {self.output_dir}"
        )
        raise TrainingDiverged(
            f"Training stopped at step {step} of {state.max_steps}: {what}. Nothing from this step was saved; {last}. "
            f"Lower learning_rate, keep max_grad_norm > 0 (gradient clipping), check the data for extreme samples, or "
            f"use bf16 instead of fp16."
        )

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if args.fp16 or model is None:
            return
        grads = [p.grad for p in model.parameters() if p.requires_grad and p.grad is not None]
        if not _all_finite(grads):
            self._stop(
                state,
                state.global_step + 1,
                "the gradient is not finite (inf or nan; the loss was inf/nan or overflowed in the backward pass)",
            )

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in _LOGGED:
            value = (logs or {}).get(key)
            if key == "grad_norm" and args.fp16:
                continue  # loss-scaled steps report inf and are skipped by the scaler
            if isinstance(value, (int, float)) and not math.isfinite(value):
                self._stop(state, state.global_step, f"the logged {key} is {value}")

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if (
            control.should_save
            and model is not None
            and not _all_finite([p for p in model.parameters() if p.requires_grad])
        ):
            self._stop(state, state.global_step, "the trained weights are not finite (inf or nan) after the update")

    def on_train_end(self, args, state, control, model=None, **kwargs):
        # the last update may have broken the weights without a checkpoint step after it; the final save follows this
        if model is not None and not _all_finite([p for p in model.parameters() if p.requires_grad]):
            self._stop(
                state, state.global_step, "the trained weights are not finite (inf or nan) at the end of training"
            )
