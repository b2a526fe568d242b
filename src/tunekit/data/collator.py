"""Batching: dynamic padding to the longest sample, rounded up to a multiple of ``pad_to_multiple_of``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .labels import IGNORE_INDEX
from .padding_free import sample_rope_positions, segment_ids


@dataclass
class PaddingCollator:
    """Right-pads ``input_ids`` with the pad id, ``labels`` with -100, builds ``attention_mask``.

    Rows with ``position_ids`` (``neat_packing``, see ``data/processors/packing.py``) get ``position_ids``
    instead of an attention mask: the padding continues as one more block (0, 1, 2 ...) and the model
    derives the block-diagonal causal mask from where positions restart. Extra columns (``length``,
    ``_source`` ...) are ignored, so the trainer can keep them for length-grouped sampling.

    ``flatten_packed`` (set for FlashAttention-2): packed rows are sent as ONE row of batch dimension 1, without
    their padding. transformers 5 derives FlashAttention-2's varlen boundaries from ``position_ids`` only when the
    batch dimension is 1 (``modeling_flash_attention_utils._is_packed_sequence``); with several rows and no mask it
    runs one plain causal sequence per row, and the samples packed in a row would attend to each other.
    """

    pad_token_id: int
    pad_to_multiple_of: int = 8
    label_pad_id: int = IGNORE_INDEX
    padding_side: str = "right"
    flatten_packed: bool = False

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        if self.flatten_packed and "position_ids" in features[0]:
            return _one_row(features)

        longest = max(len(f["input_ids"]) for f in features)
        m = self.pad_to_multiple_of
        width = ((longest + m - 1) // m) * m if m > 1 else longest
        ids = torch.full((len(features), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(features), width), self.label_pad_id, dtype=torch.long)
        mask = torch.zeros((len(features), width), dtype=torch.long)
        packed = "position_ids" in features[0]
        if packed and self.padding_side != "right":
            raise ValueError("packed rows (position_ids) are right-padded only")
        positions = torch.zeros((len(features), width), dtype=torch.long) if packed else None
        for row, f in enumerate(features):
            n = len(f["input_ids"])
            sl = slice(0, n) if self.padding_side == "right" else slice(width - n, width)
            ids[row, sl] = torch.as_tensor(f["input_ids"], dtype=torch.long)
            labels[row, sl] = torch.as_tensor(f.get("labels", f["input_ids"]), dtype=torch.long)
            mask[row, sl] = 1
            if positions is not None:
                positions[row, :n] = torch.as_tensor(f["position_ids"], dtype=torch.long)
                positions[row, n:] = torch.arange(width - n)
        weighted = _thought_mask(features, width, self.padding_side) if "thought_mask" in features[0] else {}
        if positions is not None:
            return {"input_ids": ids, "position_ids": positions, "labels": labels, **weighted}
        return {"input_ids": ids, "attention_mask": mask, "labels": labels, **weighted}


def _thought_mask(features: list[dict[str, Any]], width: int, side: str) -> dict[str, Any]:
    """``thought_mask`` (``thought_loss_weight`` between 0 and 1: 1 on a trained thought's tokens), padded with 0."""
    import torch

    out = torch.zeros((len(features), width), dtype=torch.long)
    for row, f in enumerate(features):
        n = len(f["thought_mask"])
        out[row, slice(0, n) if side == "right" else slice(width - n, width)] = torch.as_tensor(
            f["thought_mask"], dtype=torch.long
        )
    return {"thought_mask": out}


def _one_row(features: list[dict[str, Any]]) -> dict[str, Any]:
    """Packed rows (restarting ``position_ids``) concatenated into one row; each row's first label -100
    (data/padding_free.py)."""
    import torch

    ids, positions, labels = [], [], []
    for f in features:
        ids += list(f["input_ids"])
        positions += list(f["position_ids"])
        labels += [IGNORE_INDEX, *list(f.get("labels", f["input_ids"]))[1:]]
    as_row = lambda values: torch.tensor(values, dtype=torch.long).unsqueeze(0)  # noqa: E731
    row = {"input_ids": as_row(ids), "position_ids": as_row(positions), "labels": as_row(labels)}
    if "thought_mask" in features[0]:
        row["thought_mask"] = as_row([m for f in features for m in f["thought_mask"]])
    return row


@dataclass
class MultimodalCollator(PaddingCollator):
    """:class:`PaddingCollator` + the batch's media as model inputs, built by the family plugin (``data/mm_plugins``).

    Each row's ``images`` (resolved paths, in placeholder order) are opened and run through the model's
    image processor at the configured resolution: for Qwen2-VL ``pixel_values`` (every image's patches,
    concatenated in row order), ``image_grid_thw`` and M-RoPE's ``mm_token_type_ids``; videos and audio
    likewise (``pixel_values_videos`` / ``video_grid_thw``, ``input_features`` / ``feature_attention_mask``).

    Packed rows carry the media of their samples in sample order (``data/processors/packing.py``). Neat-packed rows
    (restarting ``position_ids``) of a model with M-RoPE (``rope_index``: its ``get_rope_index``) get ``position_ids``
    ``[4, B, W]``: row 0 the restarting text positions (the block-diagonal mask), rows 1-3 each packed sample's 3-D
    positions as it has them alone (``data/padding_free.py``); without it Qwen2-VL would rotate image tokens as text.
    """

    mm: Any = None
    rope_index: Any = None

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = super().__call__(features)
        paths = [p for f in features for p in (f.get("images") or [])]
        media = {k: [p for f in features for p in (f.get(k) or [])] for k in ("videos", "audios")}
        batch.update(self.mm.collate(paths, batch["input_ids"], **{k: v for k, v in media.items() if v}))
        if "position_ids" in batch and "mm_token_type_ids" in batch:  # neat-packed rows of an M-RoPE family
            if self.rope_index is None:
                raise ValueError(
                    f"neat-packed rows of the {self.mm.NAME} family need the model's get_rope_index (rope_index)"
                )
            batch["position_ids"] = _packed_rope_positions(self.rope_index, batch)
        return batch


def _packed_rope_positions(rope_index, batch: dict[str, Any]):
    """``[4, B, W]`` positions of neat-packed rows: the text positions, then each packed sample's (and the padding
    block's) M-RoPE positions computed for it alone (``padding_free.sample_rope_positions`` over the rows laid end to
    end)."""
    import torch

    text = batch["position_ids"]
    rows, width = text.shape
    flat = text.reshape(1, -1)
    lengths = torch.bincount(segment_ids(flat)[0]).tolist()
    media = {**batch, "mm_token_type_ids": batch["mm_token_type_ids"].reshape(1, -1)}
    rope = sample_rope_positions(rope_index, batch["input_ids"].reshape(1, -1), lengths, media)
    return torch.cat([text[None], rope.reshape(3, rows, width).to(text.dtype)], dim=0)
