"""``group_within_step`` for preference pairs (dpo, rm): an optimizer step's pairs re-dealt into micro-batches by
length.

A padded pair batch (:class:`~tunekit.train.batching.PairCollator`) holds ``2B`` right-padded rows, chosen ``0..B-1``
then rejected ``0..B-1``, as wide as its longest row. :func:`regroup_pairs` takes the micro-batches of one
accumulation window, sorts their pairs by pair length (the longer of chosen / rejected; ties by original position),
deals them back into micro-batches of the ORIGINAL sizes, longest first, and pads each new batch again (right
padding, width rounded up to ``pad_to_multiple_of``). A pair never splits: its chosen row, rejected row and
``ref_logps`` (``precompute_ref_log_probs``: ``[2B]``, chosen part then rejected part) move together, and each batch
keeps the layout "chosen 0..B-1, then rejected 0..B-1".

Why the step's gradient is unchanged (exactness): every dpo/rm micro-batch loss is the sum of its per-pair losses
divided by the window's pair count (``StageTrainer.pair_loss``; the Trainer does not divide by the accumulation count
again), so the step's loss is ``(1/N) Σ_window ℓ``: the mean over the window's pairs, whatever the dealing. Each pair's
``ℓ`` depends on that pair alone:

* ``pref_loss`` sigmoid (with ``dpo_label_smoothing``), hinge, ipo, orpo, simpo: functions of the pair's log-prob
  sums, its lengths and (sigmoid / hinge / ipo) its reference log-probs (``losses.preference_loss``);
* ``pref_ftx``: ``-log π(y_w|x) / |y_w|``, the pair's own per-token NLL, added per pair before the mean (``dpo.py``);
* rm: ``-log σ(r_w - r_l)`` of the pair's two scores (``rm.py``).

None of them normalises over the micro-batch's tokens, so regrouping is exact up to floating-point summation order
(tests/train/test_pair_grouping.py: float64 runs, same losses and weights). The logged metrics are micro-batch means
averaged over the micro-batches: with equal sizes also the window's mean, which is why a window of UNEQUAL
micro-batch sizes (the last of an epoch) passes through unchanged (its loss would be exact, its logged ``rewards/*``
means would move), as do left-padded batches. KTO is excluded: its KL estimate is a micro-batch-level quantity (the
mean over the micro-batch's mismatched pairs), so which examples share a micro-batch changes the loss; its batches
(``kl_`` keys) never reach this function (``window_grouping.WindowGroupingMixin``).
"""

from __future__ import annotations

import torch

from ..data.labels import IGNORE_INDEX

PAIR_KEYS = {"input_ids", "attention_mask", "token_labels"}
ROW_KEYS = ("input_ids", "attention_mask", "token_labels")


def is_pair_batch(batch: dict) -> bool:
    """A padded text pair batch: exactly ``input_ids``/``attention_mask``/``token_labels``, optionally
    ``ref_logps``."""
    return set(batch) in (PAIR_KEYS, PAIR_KEYS | {"ref_logps"})


def regroup_pairs(
    batches: list[dict], pad_token_id: int, pad_to_multiple_of: int = 8, label_pad_id: int = IGNORE_INDEX
) -> list[dict]:
    """The window's pairs sorted by pair length (longest first) and dealt into micro-batches of the original sizes."""
    if len(batches) < 2 or not all(is_pair_batch(b) for b in batches):
        return batches
    if len({"ref_logps" in b for b in batches}) > 1 or len({b["input_ids"].shape[0] for b in batches}) > 1:
        return batches  # unequal sizes: the per-pair weights would change (module doc)
    if any(b["input_ids"].shape[0] % 2 for b in batches):
        return batches
    masks = [b["attention_mask"] for b in batches]
    if any(bool((m[:, :-1] < m[:, 1:]).any()) for m in masks):  # a 0 before a 1: left padding, leave it
        return batches
    pairs = []  # (pair length, batch index, pair index, chosen length, rejected length)
    for bi, m in enumerate(masks):
        lengths = m.sum(dim=1).tolist()
        half = len(lengths) // 2
        for pi in range(half):
            c, r = int(lengths[pi]), int(lengths[half + pi])
            pairs.append((max(c, r), bi, pi, c, r))
    pairs.sort(key=lambda p: (-p[0], p[1], p[2]))
    half = batches[0]["input_ids"].shape[0] // 2
    return [
        _batch_of(batches, pairs[s : s + half], pad_token_id, pad_to_multiple_of, label_pad_id)
        for s in range(0, len(pairs), half)
    ]


def _batch_of(batches: list[dict], group: list[tuple], pad_token_id: int, pad_to: int, label_pad_id: int) -> dict:
    """One right-padded pair batch of ``group``'s pairs: chosen rows first, then rejected rows, ``ref_logps`` alike."""
    first = batches[0]
    size = len(group)
    width = group[0][0]
    if pad_to > 1:
        width = -(-width // pad_to) * pad_to
    fill = {"input_ids": pad_token_id, "attention_mask": 0, "token_labels": label_pad_id}
    new = {k: torch.full((2 * size, width), fill[k], dtype=first[k].dtype, device=first[k].device) for k in ROW_KEYS}
    ref = []
    for i, (_, bi, pi, c, r) in enumerate(group):
        src = batches[bi]
        b = src["input_ids"].shape[0] // 2
        for row, n, old in ((i, c, pi), (size + i, r, b + pi)):
            for key in ROW_KEYS:
                new[key][row, :n] = src[key][old, :n]
        if "ref_logps" in src:
            ref.append((src["ref_logps"][pi], src["ref_logps"][b + pi]))
    if ref:
        new["ref_logps"] = torch.stack([c for c, _ in ref] + [r for _, r in ref])
    return new
