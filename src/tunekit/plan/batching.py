"""Padding share and tokens per optimizer step of each batching mode (padded, packing, padding-free,
``max_tokens_per_batch``): the ``batching`` block of ``tunekit data stats`` and ``tunekit plan``.

The rows are the trainer's (cut, packed, ``val_size`` held out); the stages whose padded batches the trainer regroups
within a step are ``REGROUPED_STAGES``, imported from their one home (train/decisions/features.py: group_within_step).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..config.schema import Config
from ..data.processors.packing import plan_bins
from ..data.split import split_sizes
from ..train.decisions.features import REGROUPED_STAGES
from ..train.token_budget import batch_cost, budget_batches
from .stats import sampler_batches


def batching_mode(packing: bool, neat_packing: bool, padding_free: bool) -> str:
    if padding_free:
        return "padding_free"
    if packing:
        return "neat_packing" if neat_packing else "packing"
    return "padded"


def training_rows(
    table,
    stage: str,
    cutoff: int,
    packing: bool,
    chunk: int = 1000,
    val_size: float = 0.0,
    seed: int = 0,
    pairs: bool = False,
) -> np.ndarray:
    """Token length of every row the trainer gets, from the measured (uncut) lengths: cut to ``cutoff``; with packing
    the rows packing makes (sft: best-fit bins of ``data/processors/packing.py``; pt: ``chunk``-document blocks), each
    dataset on its own as the pipeline does; then ``val_size`` held out with the pipeline's seeded permutation.

    ``pairs`` (dpo, rm): ``[N, 2]``, each pair's chosen and rejected sequence (prompt + answer, each cut to ``cutoff``;
    a truncated pair's shorter sequence is an upper bound: the shared prompt cut is not replayed), the lengths
    ``train/token_budget.budget_batches`` takes for pairs."""

    names = np.asarray(table["dataset"])
    total = np.asarray(table["total_len"], dtype=np.int64)
    if pairs and stage in ("dpo", "rm"):
        prompt = np.asarray(table["prompt_len"], dtype=np.int64)
        total = np.minimum(
            np.stack([prompt + np.asarray(table[k], dtype=np.int64) for k in ("chosen_len", "rejected_len")], axis=1),
            cutoff,
        )
        packing = False
    parts = []
    for name in dict.fromkeys(names.tolist()):
        lengths = total[names == name]
        if lengths.ndim == 2:
            parts.append(lengths)
        elif packing and stage == "pt":
            rows = []
            for i in range(0, len(lengths), chunk):
                t = int(lengths[i : i + chunk].sum())
                rows += [cutoff] * (t // cutoff) + ([t % cutoff] if t % cutoff else [])
            parts.append(np.asarray(rows, dtype=np.int64))
        elif packing:
            clipped = np.minimum(lengths, cutoff)
            parts.append(
                np.asarray([int(clipped[b].sum()) for b in plan_bins(clipped.tolist(), cutoff)], dtype=np.int64)
            )
        else:
            parts.append(np.minimum(lengths, cutoff))
    rows = np.concatenate(parts) if parts else np.zeros((0,) + total.shape[1:], dtype=np.int64)
    if val_size > 0:
        _, n_eval = split_sizes(len(rows), val_size)
        perm = np.random.default_rng(seed).permutation(len(rows))
        rows = rows[np.sort(perm[n_eval:])]
    return rows


def _micro_batches(
    rows: np.ndarray, batch: int, accum: int, regroup: bool, group: bool, seed: int
) -> list[np.ndarray]:
    batches = sampler_batches(rows, batch, group, seed)
    if not regroup:
        return batches
    # the trainer's group_within_step: each accumulation window's samples sorted and dealt back (window_grouping.py)
    out = []
    for w in range(0, len(batches), accum):
        window = batches[w : w + accum]
        ordered = np.sort(np.concatenate(window))[::-1]
        start = 0
        for b in window:
            out.append(ordered[start : start + len(b)])
            start += len(b)
    return out


def batching_summary(
    rows,
    batch: int,
    accum: int = 1,
    world: int = 1,
    padding_free: bool = False,
    pad_to: int = 8,
    budget: int | None = None,
    regroup: bool = False,
    group: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """Pad share and tokens per optimizer step (per device) of one epoch batched as the trainer would.

    Fixed-size batches are simulated in a seeded random order (the trainer's own order is torch's; the share is a
    property of the lengths, not of one permutation); ``budget`` batches are exactly ``train/token_budget.py``'s."""

    arr = np.asarray(rows, dtype=np.int64)
    if budget:
        plan = budget_batches(arr, budget, padding_free, 1 if padding_free else pad_to, seed)
        micro = [arr[b] for b in plan.batches]
    else:
        micro = _micro_batches(arr, batch, accum, regroup and not padding_free, group, seed)
    real = int(arr.sum())
    through = sum(batch_cost(b.tolist(), padding_free, pad_to) for b in micro)
    per_device = math.ceil(len(micro) / max(1, world))
    steps = max(1, per_device // accum + int(per_device % accum > 0))
    out = {
        "rows": int(len(arr)),
        "micro_batches": len(micro),
        "steps_per_epoch": steps,
        "real_tokens": real,
        "model_tokens": int(through),
        "padding_share": round(1 - real / through, 6) if through else 0.0,
        "model_tokens_per_step": round(through / max(1, world) / steps, 1),
        "real_tokens_per_step": round(real / max(1, world) / steps, 1),
        "largest_micro_batch_tokens": max((batch_cost(b.tolist(), padding_free, pad_to) for b in micro), default=0),
    }
    if budget:
        out["oversized"] = len(plan.oversized)
    return out


def mode_comparison(
    table,
    stage: str,
    cutoff: int,
    batch: int,
    accum: int = 1,
    pad_to: int = 8,
    chunk: int = 1000,
    budget: int | None = None,
    seed: int = 0,
    packing: bool = False,
    val_size: float = 0.0,
    split_seed: int = 0,
    world: int = 1,
) -> dict[str, dict]:
    """:func:`batching_summary` of every mode on the same data (``tunekit data stats``; docs/data.md has the figures),
    over the rows that train: ``val_size`` held out with the pipeline's split (``split_seed``: the run's ``seed``), the
    micro-batches dealt to ``world`` ranks, so the steps are those ``tunekit train`` counts."""

    def rows(packed: bool, pairs: bool = False) -> np.ndarray:
        return training_rows(table, stage, cutoff, packed, chunk, val_size, split_seed, pairs=pairs)

    plain, packed = rows(False), rows(True)
    kw = dict(world=world, pad_to=pad_to, seed=seed)
    out = {
        "padded": batching_summary(plain, batch, accum, **kw),
        "padded + group_within_step": batching_summary(plain, batch, accum, regroup=True, **kw),
        "group_by_length": batching_summary(plain, batch, accum, group=True, **kw),
        "packing": batching_summary(packed, batch, accum, **kw),
        "padding_free": batching_summary(plain, batch, accum, world=world, padding_free=True, seed=seed),
    }
    if stage not in REGROUPED_STAGES:  # kto's KL estimate is per micro-batch: its batches are never regrouped
        del out["padded + group_within_step"]
    if budget:  # over the rows the run has: packed rows when packing is on; dpo / rm: [chosen, rejected] per pair
        rows_b = rows(False, pairs=True) if stage in ("dpo", "rm") else (packed if packing else plain)
        out[f"max_tokens_per_batch {budget}"] = batching_summary(rows_b, batch, accum, budget=budget, **kw)
        out[f"max_tokens_per_batch {budget} + padding_free"] = batching_summary(
            rows_b, batch, accum, world=world, padding_free=True, budget=budget, seed=seed
        )
    return out


def batching_stats(table, cfg: Config, world: int = 1) -> dict[str, Any]:
    """The ``batching`` block of ``data stats`` / ``plan``: every mode compared, and which one ``cfg`` configures, on
    the split that trains (``val_size`` held out unless ``eval_dataset`` is separate) over ``world`` ranks."""
    mode = batching_mode(cfg.use_packing, cfg.neat_packing, cfg.padding_free)
    val_size = 0.0 if cfg.eval_dataset else cfg.val_size
    modes = mode_comparison(
        table,
        cfg.stage,
        cfg.cutoff_len,
        cfg.per_device_train_batch_size,
        cfg.gradient_accumulation_steps,
        cfg.pad_to_multiple_of,
        cfg.preprocessing_batch_size,
        cfg.max_tokens_per_batch,
        cfg.data_seed or cfg.seed,
        cfg.use_packing,
        val_size,
        cfg.seed,
        world,
    )
    configured = "packing" if mode == "neat_packing" else mode
    if mode == "padded" and cfg.group_by_length:
        configured = "group_by_length"
    elif mode == "padded" and cfg.group_within_step and cfg.stage in REGROUPED_STAGES:
        configured = "padded + group_within_step"
    if cfg.max_tokens_per_batch:
        configured = f"max_tokens_per_batch {cfg.max_tokens_per_batch}" + (
            " + padding_free" if cfg.padding_free else ""
        )
    return {
        "configured": configured,
        "max_tokens_per_batch": cfg.max_tokens_per_batch,
        "batch_size": cfg.per_device_train_batch_size,
        "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
        "world_size": world,
        "val_size": val_size,
        "modes": modes,
    }
