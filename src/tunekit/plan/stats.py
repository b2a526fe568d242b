"""Token-length statistics of a dataset (``tunekit data stats``), from ``tunekit.data.lengths.measure_lengths``.

All functions take plain integer arrays so they can be tested on synthetic lengths. Padding waste is
simulated with the trainer's batching (random order; ``group_by_length`` = megabatches of 50 batches
sorted by length, as transformers' ``LengthGroupedSampler``) with a fixed seed, so it is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

PERCENTILES = (50, 90, 95, 99)
ROUND_TO = 128


def describe(values: Iterable[int]) -> dict[str, float]:
    arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.int64)
    if arr.size == 0:
        return {"count": 0, "min": 0, "mean": 0.0, **{f"p{p}": 0 for p in PERCENTILES}, "max": 0}
    out: dict[str, float] = {"count": int(arr.size), "min": int(arr.min()), "mean": round(float(arr.mean()), 2)}
    for p in PERCENTILES:
        out[f"p{p}"] = int(np.percentile(arr, p, method="inverted_cdf"))  # smallest length covering p % of samples
    out["max"] = int(arr.max())
    return out


def round_up(n: float, to: int = ROUND_TO) -> int:
    return int(max(to, math.ceil(n / to) * to))


def truncation(total: np.ndarray, cutoff: int) -> dict[str, float]:
    """Share of samples longer than ``cutoff`` and share of all tokens that would be cut off."""
    total = np.asarray(total, dtype=np.int64)
    if total.size == 0:
        return {"cutoff_len": cutoff, "samples_truncated": 0, "samples_share": 0.0, "tokens_share": 0.0}
    over = total > cutoff
    lost = np.clip(total - cutoff, 0, None).sum()
    return {
        "cutoff_len": int(cutoff),
        "samples_truncated": int(over.sum()),
        "samples_share": round(float(over.mean()), 6),
        "tokens_share": round(float(lost / max(1, total.sum())), 6),
    }


def recommend_cutoff(total: np.ndarray) -> dict[str, Any]:
    """Smallest multiple of 128 covering P99, and what covering only P95 would change."""
    stats = describe(total)
    rec = round_up(stats["p99"])
    p95 = round_up(stats["p95"])
    return {
        "recommended_cutoff_len": rec,
        "p95_cutoff_len": p95,
        "p95_saves_share": round(1 - p95 / rec, 4),  # of the longest micro-batch's activations (linear in tokens)
        "p95_truncates": truncation(total, p95),
    }


def sampler_batches(
    lengths: np.ndarray, batch: int, group: bool, seed: int = 0, group_batch: int | None = None
) -> list[np.ndarray]:
    """The micro-batches of ``lengths`` in the trainer's order: a seeded random permutation, or with ``group`` the
    megabatches of transformers' ``LengthGroupedSampler`` (up to 50 batches each, sorted longest first)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths))
    if group:
        mega = (group_batch or batch) * max(1, min(len(lengths) // max(1, (group_batch or batch) * 4), 50))
        parts = [order[i : i + mega] for i in range(0, len(order), mega)]
        order = np.concatenate([p[np.argsort(-lengths[p], kind="stable")] for p in parts]) if parts else order
    return [lengths[order[i : i + batch]] for i in range(0, len(order), batch)]


def padding_waste(lengths: Iterable[int], batch: int, pad_to: int = 1, group: bool = False, seed: int = 0) -> float:
    """Share of padded positions in the micro-batches the trainer would build."""
    arr = np.asarray(list(lengths) if not isinstance(lengths, np.ndarray) else lengths, dtype=np.int64)
    if arr.size == 0:
        return 0.0
    real = padded = 0
    for b in sampler_batches(arr, batch, group, seed):
        width = int(math.ceil(b.max() / pad_to) * pad_to)
        padded += width * len(b)
        real += int(b.sum())
    return round(1 - real / padded, 6)


def padded_tokens_per_sample(lengths: Iterable[int], batch: int, pad_to: int = 1, group: bool = False) -> float:
    arr = np.asarray(list(lengths) if not isinstance(lengths, np.ndarray) else lengths, dtype=np.int64)
    if arr.size == 0:
        return 0.0
    return float(arr.mean() / max(1e-9, 1 - padding_waste(arr, batch, pad_to, group)))


def packed_rows(lengths: Iterable[int], cutoff: int, chunk: int = 1000) -> int:
    """Rows of ``cutoff`` tokens that packing makes: each preprocessing batch of ``chunk`` samples is
    concatenated and cut on its own (tunekit.data.processors.pt.pack), so each leaves one short row."""
    arr = np.asarray(list(lengths) if not isinstance(lengths, np.ndarray) else lengths, dtype=np.int64)
    return int(sum(math.ceil(int(arr[i : i + chunk].sum()) / cutoff) for i in range(0, len(arr), chunk)))


def packing_waste(lengths: Iterable[int], cutoff: int, chunk: int = 1000) -> float:
    """Share of empty positions when samples are packed into rows of ``cutoff`` tokens."""
    arr = np.asarray(list(lengths) if not isinstance(lengths, np.ndarray) else lengths, dtype=np.int64)
    total = int(arr.sum())
    if total == 0:
        return 0.0
    return round(1 - total / (packed_rows(arr, cutoff, chunk) * cutoff), 6)


#: the per-part length columns of each stage (``tunekit.data.lengths``) and the name each gets in the output
PARTS = {
    "sft": ("prompt", "response"),
    "rm": ("prompt", "chosen", "rejected", "longest"),
    "dpo": ("prompt", "chosen", "rejected", "longest"),
    "kto": ("prompt", "response"),
    "pt": ("document",),
    "ppo": ("prompt",),
    "grpo": ("prompt",),
}


def pt_blocks(lengths: Iterable[int], cutoff: int, packing: bool, chunk: int = 1000) -> dict[str, Any]:
    """What ``stage: pt`` makes of documents of these lengths (tunekit.data.processors.pt).

    Packing: each preprocessing batch of ``chunk`` documents is concatenated and cut into ``cutoff``-token
    blocks; its last, shorter block (the tail) is kept, so no token is dropped. Without packing every
    document is one sample cut to ``cutoff`` tokens: its tail beyond is dropped.
    """
    arr = np.asarray(list(lengths) if not isinstance(lengths, np.ndarray) else lengths, dtype=np.int64)
    total = int(arr.sum())
    if packing:
        sums = [int(arr[i : i + chunk].sum()) for i in range(0, len(arr), chunk)]
        full = sum(t // cutoff for t in sums)
        tails = [t % cutoff for t in sums if t % cutoff]
        return {
            "packing": True,
            "block_len": int(cutoff),
            "blocks": full + len(tails),
            "full_blocks": full,
            "tail_blocks": len(tails),
            "tail_tokens": sum(tails),
            "tokens_kept": total,
            "tokens_dropped": 0,
        }
    dropped = int(np.clip(arr - cutoff, 0, None).sum())
    return {
        "packing": False,
        "block_len": int(cutoff),
        "blocks": int(arr.size),
        "documents_truncated": int((arr > cutoff).sum()),
        "tokens_kept": total - dropped,
        "tokens_dropped": dropped,
    }


def dataset_stats(
    table, cutoff: int, batch: int, pad_to: int = 8, chunk: int = 1000, stage: str = "sft", packing: bool | None = None
) -> dict[str, Any]:
    """Per-dataset and overall statistics from a lengths table (columns of measure_lengths for ``stage``).

    Every stage: the total length per sample (what ``cutoff_len`` is compared with) and one length summary per
    part (``PARTS``: pairs report prompt, chosen, rejected and the longer answer, which decides truncation);
    kto adds the label balance, pt what packing (``packing``, default: on for pt) makes of the documents.
    """
    parts = PARTS.get(stage, PARTS["sft"])
    packing = (stage == "pt") if packing is None else packing
    cols = {k: np.asarray(table[f"{k}_len"], dtype=np.int64) for k in (*parts, "total", "trainable")}
    names = np.asarray(table["dataset"])
    tags = np.asarray(table["kto_tag"], dtype=bool) if stage == "kto" else None

    def block(mask: np.ndarray) -> dict[str, Any]:
        total = cols["total"][mask]
        clipped = np.minimum(total, cutoff)
        out: dict[str, Any] = dict(describe(total))
        for part in parts:
            out[part] = describe(cols[part][mask])
        out["total_tokens"] = int(total.sum())
        out["trainable_tokens"] = int(cols["trainable"][mask].sum())
        out["truncation"] = truncation(
            total if not (stage == "pt" and packing) else np.zeros(0, dtype=np.int64), cutoff
        )
        out.update(recommend_cutoff(total))
        out["padding_waste"] = {
            "random": padding_waste(clipped, batch, pad_to, False),
            "group_by_length": padding_waste(clipped, batch, pad_to, True),
            "packing": packing_waste(total, cutoff, chunk),
        }
        if tags is not None:
            good = int(tags[mask].sum())
            out["labels"] = {
                "desirable": good,
                "undesirable": int(mask.sum()) - good,
                "desirable_share": round(good / max(1, int(mask.sum())), 6),
            }
        if stage == "pt":
            out["blocks"] = pt_blocks(total, cutoff, packing, chunk)
        return out

    per = {str(n): block(names == n) for n in dict.fromkeys(names.tolist())}
    overall = block(np.ones(len(names), dtype=bool))
    if stage == "pt" and len(per) > 1:  # each dataset is packed on its own: the blocks add up
        overall["blocks"] = {
            k: (sum(b["blocks"][k] for b in per.values()) if k not in ("packing", "block_len") else v)
            for k, v in overall["blocks"].items()
        }
    out = {
        "stage": stage,
        "parts": list(parts),
        "cutoff_len": cutoff,
        "batch_size": batch,
        "datasets": per,
        "overall": overall,
        "recommended_cutoff_len": overall["recommended_cutoff_len"],
    }
    if "image_tokens" in (table.column_names if hasattr(table, "column_names") else table):
        out["media"] = media_stats(table, cutoff)
    return out


MEDIA_LISTED = 20  # samples named in the "media alone exceed cutoff_len" list


def media_stats(table, cutoff: int) -> dict[str, Any]:
    """Media tokens per sample of multimodal data (``data/lengths.py`` columns), per kind over the samples that carry
    that kind; the samples whose media tokens alone exceed ``cutoff``, named (training drops them: a sample with
    media is never cut, so any multimodal sample over ``cutoff_len`` is dropped and listed in the report)."""
    kinds = {k: np.asarray(table[f"{k}_tokens"], dtype=np.int64) for k in ("image", "video", "audio")}
    counts = {k: np.asarray(table[f"{k}s"], dtype=np.int64) for k in kinds}
    media = sum(kinds.values())
    total = np.asarray(table["total_len"], dtype=np.int64)
    out: dict[str, Any] = {}
    for k, tokens in kinds.items():
        has = counts[k] > 0
        if has.any():
            out[k] = {
                "samples": int(has.sum()),
                "media": int(counts[k].sum()),
                "tokens": describe(tokens[has]),
                "tokens_per_item": describe((tokens[has] / counts[k][has]).round().astype(np.int64)),
            }
    over = np.flatnonzero(media > cutoff)
    names, sources = table["dataset"], table["source"]
    out["over_cutoff"] = {
        "samples": int(len(over)),
        "listed": [
            {
                "dataset": names[int(i)],
                "source": sources[int(i)],
                "media_tokens": int(media[i]),
                "total_len": int(total[i]),
            }
            for i in over[:MEDIA_LISTED]
        ],
    }
    dropped = (media > 0) & (total > cutoff)
    out["dropped_in_training"] = int(
        dropped.sum()
    )  # multimodal samples longer than cutoff_len: dropped whole, never cut
    out["recommended_cutoff_len"] = round_up(int(media.max())) if len(media) else 0
    return out


def plot_cdf(table, path: str, cutoff: int, recommended: int) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = np.asarray(table["dataset"])
    total = np.asarray(table["total_len"], dtype=np.int64)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    groups = [("all", total)] + (
        [(str(n), total[names == n]) for n in dict.fromkeys(names.tolist())] if len(set(names.tolist())) > 1 else []
    )
    for label, values in groups:
        xs = np.sort(values)
        ax.plot(
            xs,
            np.arange(1, len(xs) + 1) / len(xs),
            label=f"{label} (n={len(xs)})",
            linewidth=2 if label == "all" else 1.2,
        )
    ax.axvline(cutoff, color="#c0392b", linestyle="--", label=f"cutoff_len {cutoff}")
    if recommended != cutoff:
        ax.axvline(recommended, color="#27ae60", linestyle=":", label=f"recommended {recommended} (P99)")
    ax.set_xlabel("tokens per sample (the total cutoff_len is compared with)")
    ax.set_ylabel("share of samples ≤ x")
    ax.set_ylim(0, 1.01)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
