"""SFT packing (``packing: true``): several tokenized samples share one sequence of at most ``cutoff_len``.

Samples are placed best-fit in decreasing length order (deterministic), so sequences are nearly full
and batches carry little padding. Labels are concatenated, except that the first token of every sample
after the first gets -100: no token is trained to follow another sample's text (with the default
masking that token is a prompt token and -100 already; with ``train_on_prompt`` it would not be).

Attention, for a row packing samples A (3 tokens) and B (2 tokens), then one pad (``1`` = may attend)::

    plain packing (LLaMA-Factory's packing)      neat_packing
    position_ids 0 1 2 3 4 | pad                 position_ids 0 1 2 0 1 | 0
         a0 a1 a2 b0 b1                               a0 a1 a2 b0 b1
    a0   1                                       a0   1
    a1   1  1                                    a1   1  1
    a2   1  1  1                                 a2   1  1  1
    b0   1  1  1  1                              b0            1
    b1   1  1  1  1  1                           b1            1  1

Plain packing is one causal sequence: B sees A, and B's positions continue A's. ``neat_packing`` stores
``position_ids`` that restart at 0 for every sample; the collator then sends ``position_ids`` and no
``attention_mask``, and transformers builds the block-diagonal causal mask above from the restarts
(``masking_utils.find_packed_sequence_indices`` for sdpa/eager; FlashAttention-2 runs the blocks as
variable-length sequences). Each sample then gets exactly the logits it gets alone, RoPE included.
Right padding forms its own block after the last sample (label -100), which causal attention never
lets a real token see.
"""

from __future__ import annotations

from ..labels import IGNORE_INDEX
from ..media_columns import MEDIA_COLUMNS
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


def pack_dataset(dataset, cutoff_len: int, neat: bool = False):
    """A new ``datasets.Dataset`` of packed rows (input_ids, labels, length, _status, _source; + position_ids when
    neat; + thought_mask when the samples have it; + the samples' images / videos / audios, concatenated in sample
    order, for a multimodal dataset)."""
    import datasets

    ids, labels, status, sources = dataset["input_ids"], dataset["labels"], dataset["_status"], dataset["_source"]
    rows = {"input_ids": [], "labels": [], "length": [], "_status": [], "_source": []}
    if neat:
        rows["position_ids"] = []
    thought = dataset["thought_mask"] if "thought_mask" in dataset.column_names else None  # thought_loss_weight
    if thought is not None:
        rows["thought_mask"] = []
    media = {k: dataset[k] for k in MEDIA_COLUMNS if k in dataset.column_names}  # a row's media, in sample order
    rows.update({k: [] for k in media})
    for group in plan_bins([len(x) for x in ids], cutoff_len):
        for k, col in media.items():
            rows[k].append([p for i in group for p in (col[i] or [])])
        rows["input_ids"].append([t for i in group for t in ids[i]])
        row_labels: list[int] = []
        for k, i in enumerate(group):
            row_labels += labels[i] if k == 0 else [IGNORE_INDEX, *labels[i][1:]]
        rows["labels"].append(row_labels)
        if neat:
            rows["position_ids"].append([p for i in group for p in range(len(ids[i]))])
        if thought is not None:
            rows["thought_mask"].append([m for i in group for m in thought[i]])
        rows["length"].append(len(rows["input_ids"][-1]))
        rows["_status"].append(TRUNCATED if any(status[i] == TRUNCATED for i in group) else KEPT)
        rows["_source"].append("; ".join(sources[i] for i in group))
    return datasets.Dataset.from_dict(rows)
