"""The SFT loss with a reply's thought weighted (``thought_loss_weight`` strictly between 0 and 1).

The data marks each token of a trained thought block (``thought_mask``, 1 on ``<think>`` ... ``</think>`` and the blank
line after it: ``data/processors/sft.py``). A trained target ``y_t`` then weighs ``w_t = thought_loss_weight`` when it
is a thought token, else 1, and an optimizer step's loss is

    L = sum_t w_t * CE_t / sum_t w_t

over every trained target of the step's micro-batches (and devices, with ``average_tokens_across_devices``): the
normalisation is the step's summed weights, so the thought and the answer share the loss in the ratio of their weighted
token counts, weight 1 gives the plain trained-token mean, and weight 0 would equal masking the thought (the data
masks it for ``thought_loss_weight: 0``, so every loss path serves that case). :func:`step_weight_sum` replaces the
Trainer's trained-token count by that sum; :func:`weighted_loss` divides by it. Weight 0 and 1 never reach this module.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..data.labels import IGNORE_INDEX

THOUGHT_KEY = "thought_mask"


def target_weights(labels: torch.Tensor, thought: torch.Tensor, weight: float) -> torch.Tensor:
    """The weight of each trained target, in the order of ``trained_positions(labels)``: position t predicts label t+1,
    so its weight is that of token t+1."""
    targets = F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)
    is_thought = F.pad(thought[:, 1:], (0, 1), value=0)[targets != IGNORE_INDEX].bool()
    ones = torch.ones(is_thought.shape, dtype=torch.float32, device=labels.device)
    return torch.where(is_thought, torch.full_like(ones, weight), ones)


def step_weight_sum(trainer, batches: list[dict], device) -> torch.Tensor | None:
    """``sum w_t`` over the trained targets of one optimizer step's micro-batches, gathered across devices as the
    Trainer gathers its trained-token count (``Trainer._get_num_items_in_batch``, transformers 5.24)."""
    weight = trainer.tunekit_config.thought_loss_weight
    total = sum(target_weights(b["labels"], b[THOUGHT_KEY], weight).sum() for b in batches)
    total = torch.as_tensor(total, dtype=torch.float32).to(device)
    args = trainer.args
    if args.average_tokens_across_devices and args.world_size > 1:
        total = trainer.accelerator.gather(total).sum()
    elif args.n_gpu > 1:
        total = total / args.n_gpu
    return total / (trainer.get_tp_size() * trainer.get_cp_size() * trainer.get_sp_size())


def weighted_loss(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor, weight_sum=None) -> torch.Tensor:
    """``sum w_t * CE_t`` over already-selected rows (``logits[i]`` predicts ``targets[i]``, upcast to fp32), divided
    by the step's ``weight_sum`` (:func:`step_weight_sum`), or by this batch's own weights without it."""
    logits = logits.reshape(-1, logits.shape[-1]).float()
    if targets.numel() == 0:  # nothing trained in this micro-batch: a zero that keeps the graph connected
        return logits.sum() * 0.0
    total = (F.cross_entropy(logits, targets, reduction="none") * weights.to(logits.device)).sum()
    if weight_sum is None:
        return total / weights.sum().to(total.device)
    return total / (weight_sum.to(total.device) if torch.is_tensor(weight_sum) else weight_sum)
