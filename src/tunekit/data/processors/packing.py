"""SFT packing (``packing: true``): several tokenized samples share one sequence of at most ``cutoff_len``.

Samples are placed best-fit in decreasing length order (deterministic), so sequences are nearly full
and batches carry little padding. Labels are concatenated unchanged: each sample's prompt stays masked,
so no token is trained to follow another sample's text. Attention does cross sample boundaries
(plain packing, as LLaMA-Factory's ``packing``); ``neat_packing`` is not implemented.
"""

from __future__ import annotations

from . import KEPT, TRUNCATED


def plan_bins(lengths: list[int], capacity: int) -> list[list[int]]:
    """Indices grouped into bins of total length <= capacity: best fit, longest first (O(n log n))."""
    import bisect

    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    free: list[tuple[int, int]] = []  # sorted (room left, bin index)
    for i in order:
        pos = bisect.bisect_left(free, (lengths[i], -1))
        if pos < len(free):
            room, b = free.pop(pos)
            bins[b].append(i)
        else:
            room, b = capacity, len(bins)
            bins.append([i])
        bisect.insort(free, (room - lengths[i], b))
    return [sorted(b) for b in bins]


def pack_dataset(dataset, cutoff_len: int):
    """A new ``datasets.Dataset`` of packed rows (input_ids, labels, length, _status, _source)."""
    import datasets

    ids, labels, status, sources = dataset["input_ids"], dataset["labels"], dataset["_status"], dataset["_source"]
    rows = {"input_ids": [], "labels": [], "length": [], "_status": [], "_source": []}
    for group in plan_bins([len(x) for x in ids], cutoff_len):
        rows["input_ids"].append([t for i in group for t in ids[i]])
        rows["labels"].append([t for i in group for t in labels[i]])
        rows["length"].append(len(rows["input_ids"][-1]))
        rows["_status"].append(TRUNCATED if any(status[i] == TRUNCATED for i in group) else KEPT)
        rows["_source"].append("; ".join(sources[i] for i in group))
    return datasets.Dataset.from_dict(rows)
