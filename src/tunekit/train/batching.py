"""Collators of the preference and RL stages.

Labels travel as ``token_labels`` (not ``labels``): the HF Trainer would otherwise count label tokens
and skip its division by the accumulation steps, and these stages average per pair / per prompt.

Padding-free batches (``padding_free: true``; dpo, kto, rm): every sequence of the micro-batch — for a pair its
chosen AND its rejected answer — goes into ONE row, ``input_ids`` of shape ``[1, T]``, ``T`` = the sum of the
sequence lengths, no pad token anywhere. ``position_ids`` restart at 0 for each sequence and no ``attention_mask``
is sent, so transformers builds the block-diagonal causal mask from the restarts
(``masking_utils.find_packed_sequence_indices``; FlashAttention-2 runs the blocks as variable-length sequences):
each sequence gets exactly the logits it gets alone. ``cu_seqlens`` (``[0, n_0, n_0 + n_1, ...]``, FlashAttention's
offsets) marks the sequences, in the padded batch's row order (chosen 0..B-1, then rejected 0..B-1), so
:func:`packed_sequence_logps` and :func:`segment_last` give per-sequence values that line up with the padded path's
rows. The first token of each sequence gets label -100: the last logit of a sequence would otherwise be trained to
predict the next sequence's first token (in a padded row that label is never used: the causal shift drops it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..data.labels import IGNORE_INDEX
from ..data.media_columns import MEDIA_COLUMNS
from ..data.padding_free import concatenate, media_of, refuse_family, rope_index_of, with_media


def pad(rows: list[list[int]], value: int, multiple: int = 1, left: bool = False) -> torch.Tensor:
    longest = max(len(r) for r in rows)
    width = ((longest + multiple - 1) // multiple) * multiple if multiple > 1 else longest
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            if left:
                out[i, width - len(r) :] = torch.as_tensor(r, dtype=torch.long)
            else:
                out[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
    return out


def packed_row(rows: list[list[int]], labels: list[list[int]] | None = None) -> dict[str, torch.Tensor]:
    """``rows`` concatenated into one row: ``input_ids``/``position_ids`` ``[1, T]``, ``cu_seqlens``
    ``[len(rows) + 1]`` and, with ``labels``, ``token_labels`` ``[1, T]`` (each sequence's first label -100, see the
    module doc). The row itself is SFT's padding-free row (``data.padding_free.concatenate``); ``cu_seqlens`` marks the
    sequences."""
    if any(not r for r in rows):
        raise ValueError("padding-free batch with an empty sequence")
    ids, positions, flat = concatenate(rows, labels)
    cu = torch.zeros(len(rows) + 1, dtype=torch.long)
    cu[1:] = torch.cumsum(torch.tensor([len(r) for r in rows], dtype=torch.long), 0)
    batch = {
        "input_ids": torch.tensor(ids, dtype=torch.long)[None],
        "position_ids": torch.tensor(positions, dtype=torch.long)[None],
        "cu_seqlens": cu,
    }
    if labels is not None:
        batch["token_labels"] = torch.tensor(flat, dtype=torch.long)[None]
    return batch


def segment_of_tokens(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """The sequence index of every token of a packed row (``[T]``)."""
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]
    return torch.repeat_interleave(torch.arange(len(lengths), device=cu_seqlens.device), lengths)


def packed_sequence_logps(
    logits: torch.Tensor, labels: torch.Tensor, cu_seqlens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Σ_t log p(y_t | y_<t), n)`` per sequence of a packed row (``logits [1, T, V]``, ``labels [1, T]``): what
    :func:`tunekit.train.losses.sequence_logps` gives per row of the padded batch (``logits[t]`` predicts
    ``labels[t + 1]``; a sequence's first label is -100, so no sum crosses a boundary)."""
    logits, labels = logits[0, :-1], labels[0, 1:]
    logits = logits if logits.dtype == torch.float64 else logits.float()  # as sequence_logps: half precision upcast
    mask = labels != IGNORE_INDEX
    token_logps = torch.log_softmax(logits, dim=-1).gather(-1, labels.masked_fill(~mask, 0).unsqueeze(-1)).squeeze(-1)
    owner = segment_of_tokens(cu_seqlens)[1:]  # the sequence of the label each logit predicts
    n = cu_seqlens.numel() - 1
    sums = torch.zeros(n, dtype=token_logps.dtype, device=token_logps.device).index_add(0, owner, token_logps * mask)
    counts = torch.zeros(n, dtype=torch.long, device=labels.device).index_add(0, owner, mask.long())
    return sums, counts


def segment_last(values: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """``values[0, t]`` at the last token of each sequence of a packed row (a reward model's scores)."""
    return values[0, cu_seqlens[1:] - 1]


def sequence_view(batch: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The model inputs of one set of sequences of a collated batch (``prefix`` ``kl_``: KTO's mismatched pairs),
    padded (``attention_mask``) or padding-free (``position_ids`` + ``cu_seqlens``, no mask): the keys of
    :func:`tunekit.train.stages.reference_policy.forward_logps`."""
    return {
        "input_ids": batch[f"{prefix}input_ids"],
        "attention_mask": batch.get(f"{prefix}attention_mask"),
        "labels": batch.get(f"{prefix}token_labels"),
        "position_ids": batch.get(f"{prefix}position_ids"),
        "cu_seqlens": batch.get(f"{prefix}cu_seqlens"),
    }


def mask_of(rows: list[list[int]], like: torch.Tensor, left: bool = False) -> torch.Tensor:
    mask = torch.zeros_like(like)
    for i, r in enumerate(rows):
        if left:
            mask[i, like.shape[1] - len(r) :] = 1
        else:
            mask[i, : len(r)] = 1
    return mask


@dataclass
class PairCollator:
    """Chosen rows first, then rejected rows, in one right-padded batch of ``2B`` sequences (one forward)."""

    pad_token_id: int
    pad_to_multiple_of: int = 8

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        ids, labels = pair_rows(features)
        input_ids = pad(ids, self.pad_token_id, self.pad_to_multiple_of)
        batch = {
            "input_ids": input_ids,
            "attention_mask": mask_of(ids, input_ids),
            "token_labels": pad(labels, IGNORE_INDEX, self.pad_to_multiple_of),
        }
        return with_pair_references(batch, features)


def pair_rows(features: list[dict[str, Any]]) -> tuple[list[list[int]], list[list[int]]]:
    """Token ids and labels of a batch of pairs: chosen 0..B-1, then rejected 0..B-1."""
    ids = [f["chosen_input_ids"] for f in features] + [f["rejected_input_ids"] for f in features]
    labels = [f["chosen_labels"] for f in features] + [f["rejected_labels"] for f in features]
    return ids, labels


def with_pair_references(batch: dict[str, Any], features: list[dict[str, Any]]) -> dict[str, Any]:
    if "ref_chosen_logps" in features[0]:
        batch["ref_logps"] = torch.tensor(
            [f["ref_chosen_logps"] for f in features] + [f["ref_rejected_logps"] for f in features]
        )
    return batch


@dataclass
class PaddingFreePairCollator:
    """The pairs of the micro-batch in one padding-free row (module doc): chosen 0..B-1, then rejected 0..B-1, so
    both answers of a pair always share a micro-batch and sequence ``i`` is row ``i`` of :class:`PairCollator`'s batch.

    With ``mm`` (a vision-language model's plugin) the pair's images (videos, audio) go with its chosen and again with
    its rejected sequence, in the row's sequence order, and a model with M-RoPE (``rope_index``) gets each sequence's
    3-D positions as it has them alone (``data.padding_free.with_media``): the same per-sequence inputs as
    :class:`MultimodalPairCollator`."""

    mm: Any = None
    rope_index: Any = None

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        rows, labels = pair_rows(features)
        batch = packed_row(rows, labels)
        if self.mm is not None:  # every kind of media twice: with the chosen sequences, then with the rejected ones
            media = {k: media_of(features, k) for k in MEDIA_COLUMNS}
            batch = with_media(
                batch,
                self.mm,
                self.rope_index,
                media["images"] * 2,
                [len(r) for r in rows],
                videos=media["videos"] * 2,
                audios=media["audios"] * 2,
            )
        return with_pair_references(batch, features)


def padding_free_pair_collator(mm=None, model=None) -> PaddingFreePairCollator:
    """:class:`PaddingFreePairCollator` for dpo / rm; with ``mm`` refused for the families of
    ``data.padding_free.REFUSED_FAMILIES``, and the M-RoPE function taken from ``model``."""
    if mm is None:
        return PaddingFreePairCollator()
    refuse_family(mm, "padding_free")
    return PaddingFreePairCollator(mm=mm, rope_index=rope_index_of(model))


@dataclass
class MultimodalPairCollator(PairCollator):
    """:class:`PairCollator` for a vision-language model: the pair's images (videos, audio) go with its chosen row and
    again with its rejected row (rows are chosen 0..B-1, then rejected 0..B-1), as the family plugin builds them
    (``data/mm_plugins``)."""

    mm: Any = None

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = super().__call__(features)
        media = {k: [p for f in features for p in (f.get(k) or [])] for k in MEDIA_COLUMNS}
        extra = {k: v + v for k, v in media.items() if k != "images" and v}  # videos / audio: the same rule as images
        batch.update(self.mm.collate(media["images"] + media["images"], batch["input_ids"], **extra))
        return batch


@dataclass
class KTOCollator:
    """The examples, plus mismatched pairs (prompt i, ``kl_response_ids`` of i — another example's answer) for KTO's KL
    estimate."""

    pad_token_id: int
    pad_to_multiple_of: int = 8

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        ids = [f["input_ids"] for f in features]
        labels = [f["labels"] for f in features]
        kl_ids, kl_labels = kl_rows(features)
        input_ids = pad(ids, self.pad_token_id, self.pad_to_multiple_of)
        kl_input_ids = pad(kl_ids, self.pad_token_id, self.pad_to_multiple_of)
        batch = {
            "input_ids": input_ids,
            "attention_mask": mask_of(ids, input_ids),
            "token_labels": pad(labels, IGNORE_INDEX, self.pad_to_multiple_of),
            "kl_input_ids": kl_input_ids,
            "kl_attention_mask": mask_of(kl_ids, kl_input_ids),
            "kl_token_labels": pad(kl_labels, IGNORE_INDEX, self.pad_to_multiple_of),
        }
        return with_kto_fields(batch, features)


def kl_rows(features: list[dict[str, Any]]) -> tuple[list[list[int]], list[list[int]]]:
    """KTO's mismatched pairs: prompt i with ``kl_response_ids`` of i (or the next example's answer)."""
    n = len(features)
    kl_ids, kl_labels = [], []
    for i, f in enumerate(features):
        other = f["kl_response_ids"] if "kl_response_ids" in f else features[(i + 1) % n]["response_ids"]
        kl_ids.append(f["prompt_ids"] + other)
        kl_labels.append([IGNORE_INDEX] * len(f["prompt_ids"]) + other)
    return kl_ids, kl_labels


def with_kto_fields(batch: dict[str, Any], features: list[dict[str, Any]]) -> dict[str, Any]:
    batch["desirable"] = torch.tensor([bool(f["kto_tag"]) for f in features])
    if "ref_logps" in features[0]:
        batch["ref_logps"] = torch.tensor([f["ref_logps"] for f in features])
        batch["ref_kl_logps"] = torch.tensor([f["ref_kl_logps"] for f in features])
    return batch


@dataclass
class PaddingFreeKTOCollator:
    """:class:`KTOCollator` padding-free: the examples in one row, their mismatched pairs in a second (``kl_`` keys).

    With ``mm`` each example's media go with its sequence in both rows (a mismatched pair has the example's own prompt,
    where the media sit), as ``MultimodalKTOCollator`` (``stages/kto.py``) does for the padded rows; ``rope_index``
    gives the Qwen-VL families per-sequence 3-D positions (``data.padding_free.with_media``)."""

    mm: Any = None
    rope_index: Any = None

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        rows, kl_ids = [f["input_ids"] for f in features], kl_rows(features)
        batch, kl = packed_row(rows, [f["labels"] for f in features]), packed_row(*kl_ids)
        if self.mm is not None:
            media = {k: media_of(features, k) for k in MEDIA_COLUMNS}
            for row, ids in ((batch, rows), (kl, kl_ids[0])):
                with_media(
                    row,
                    self.mm,
                    self.rope_index,
                    media["images"],
                    [len(r) for r in ids],
                    videos=media["videos"],
                    audios=media["audios"],
                )
        batch.update({f"kl_{k}": v for k, v in kl.items()})
        return with_kto_fields(batch, features)


@dataclass
class PromptCollator:
    """Left-padded prompts for generation; texts and reference answers ride along for reward functions."""

    pad_token_id: int

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        ids = [f["input_ids"] for f in features]
        input_ids = pad(ids, self.pad_token_id, left=True)
        return {
            "input_ids": input_ids,
            "attention_mask": mask_of(ids, input_ids, left=True),
            "prompt_text": [f.get("prompt_text", "") for f in features],
            "reference": [f.get("reference", "") for f in features],
        }
