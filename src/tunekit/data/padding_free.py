"""Padding-free batches (``padding_free: true``): a micro-batch's samples concatenated into ONE row.

For samples A (3 tokens) and B (2 tokens) the collator sends, with batch dimension 1::

    input_ids     a0 a1 a2 b0 b1
    position_ids   0  1  2  0  1          restart at every sample: RoPE sees each sample as if alone
    labels        a0 a1 a2 -100 b1        B's first label -100: no token is trained to follow another sample
    (no attention_mask, no pad token)

What transformers 5 (checked in 5.24: ``masking_utils.py``, ``modeling_flash_attention_utils.py``) needs from
this, and does with it:

- **sdpa / eager** (CPU, or any GPU without FlashAttention): ``masking_utils._preprocess_mask_arguments`` looks at
  ``position_ids`` only when the 2-D ``attention_mask`` is ``None`` *and* there is no KV cache (training: the loader
  sets ``use_cache = False``). ``find_packed_sequence_indices`` then numbers the samples wherever consecutive
  positions do not step by exactly 1 (``[[0, 0, 0, 1, 1]]`` above) and ``create_causal_mask`` ANDs the causal
  mask with "same sample" (``packed_sequence_mask_function``): the block-diagonal causal mask, built by
  transformers itself. A 2-D ``position_ids`` of shape ``[1, T]`` is all it reads.
- **flash_attention_2** (GPU): ``_flash_attention_forward`` gets no mask and, since the batch dimension is 1,
  ``_is_packed_sequence(position_ids, batch_size=1)`` is true; ``prepare_fa_kwargs_from_position_ids`` takes
  ``cu_seqlens`` from where the position equals its minimum (0) and runs ``flash_attn_varlen_func``: every
  sample is its own variable-length sequence, nothing is computed across samples. No ``cu_seq_lens_q`` needs
  to be passed: they are derived from ``position_ids``, which is why the row must have batch dimension 1
  (with ``batch > 1`` and no mask, FlashAttention-2 would run one plain causal sequence per row).

The loss needs nothing special. The HF Trainer counts the step's trained tokens over ``labels[..., 1:]``, and the
shifted label of B's first position is the -100 above, so the count equals the padded batch's exactly; the
trained-token LM head (``train/token_loss.py``) keeps the positions whose next label is not -100, which is the
same set of (hidden state, target) pairs as in the padded batch. So loss and gradients equal the padded batch's
up to the floating-point summation order (tests/train/test_padding_free.py).

**With media** (vision-language and audio models, ``data/mm_plugins``): the samples' images, videos and audio go
through the family plugin's ``collate`` in sample order, so ``pixel_values`` / ``image_grid_thw`` (etc.) are the
concatenation of what each sample has alone and the model scatters each sample's features into its own placeholder
tokens. A multimodal sample is never cut (``data/processors/media.py`` drops one that does not fit ``cutoff_len``
whole, before any batching), so a row never splits a run of media tokens. Qwen2-VL / Qwen2.5-VL / Qwen3-VL rotate
with 3-D positions (M-RoPE, ``get_rope_index``): each sample's (t, h, w) positions are the model's own
``get_rope_index`` of that sample alone, and the row gets ``position_ids`` of shape ``[4, 1, T]``: row 0 the text
positions restarting per sample, which transformers 5.24 (``Qwen2VLTextModel.forward``) reads for the
block-diagonal mask and for FlashAttention-2's varlen boundaries, rows 1-3 the per-sample M-RoPE positions
(tests/multimodal/test_padding_free_media.py). Families whose attention mask transformers cannot combine with packed
positions are refused by name (:data:`REFUSED_FAMILIES`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config.problems import Said, config_error
from .labels import IGNORE_INDEX


def concatenate(
    rows: list[list[int]], labels: list[list[int]] | None = None
) -> tuple[list[int], list[int], list[int]]:
    """``(input_ids, position_ids, labels)`` of one padding-free row (see the module docstring).

    ``labels`` default to the ids themselves (pt). Every sample's first label becomes -100 (for the first sample
    it is never used: labels are shifted by one)."""
    ids: list[int] = []
    positions: list[int] = []
    out_labels: list[int] = []
    for k, row in enumerate(rows):
        if not row:
            continue
        ids.extend(row)
        positions.extend(range(len(row)))
        lab = list(labels[k]) if labels is not None else list(row)
        if len(lab) != len(row):
            raise ValueError(f"sample {k}: {len(lab)} labels for {len(row)} tokens")
        out_labels.append(IGNORE_INDEX)
        out_labels.extend(lab[1:])
    return ids, positions, out_labels


def segment_ids(position_ids) -> Any:
    """Which sample each position belongs to, as transformers derives it (``find_packed_sequence_indices``'s rule:
    a new sample wherever the position does not step by exactly 1). A tensor ``[batch, T]``."""
    import torch

    first = position_ids[:, :1] - 1
    return (torch.diff(position_ids, prepend=first, dim=-1) != 1).cumsum(-1)


#: media families that cannot be batched padding-free (or neat-packed), with the reason named in the refusal
REFUSED_FAMILIES = {"gemma3": Said("part_gemma3_packed_mask")}


def refuse_family(mm, option: str) -> None:
    """A :class:`~tunekit.errors.ConfigError` for a media family of :data:`REFUSED_FAMILIES` batched with
    ``option``."""
    reason = REFUSED_FAMILIES.get(getattr(mm, "NAME", ""))
    if reason is not None:
        raise config_error("data_family_not_packed", (option,), option=option, family=mm.NAME, reason=reason)


def rope_index_of(model) -> Any:
    """The model's own M-RoPE function (``get_rope_index`` of Qwen2-VL's inner model, found through any wrapper such as
    PEFT's), or None for a model with 1-D positions."""
    if model is None:
        return None
    for module in model.modules():
        if callable(getattr(type(module), "get_rope_index", None)):
            return module.get_rope_index
    return None


def sample_rope_positions(rope_index, row_ids, lengths: list[int], media: dict[str, Any]) -> Any:
    """The M-RoPE positions ``[3, 1, T]`` of a row of samples of ``lengths`` tokens (``row_ids`` ``[1, T]``), each
    sample's as ``rope_index`` gives it for that sample alone: the samples are stacked into a right-padded batch with
    its attention mask (``get_rope_index`` numbers the unmasked tokens of each row from 0, taking the grids in order),
    and each sample's slice is concatenated back. ``media``: the plugin's inputs of the row (``mm_token_type_ids``
    ``[1, T]``, grids in sample order)."""
    import torch

    n, width = len(lengths), max(lengths)
    ids = torch.zeros((n, width), dtype=row_ids.dtype)
    mask = torch.zeros((n, width), dtype=torch.long)
    types = torch.zeros((n, width), dtype=media["mm_token_type_ids"].dtype)
    start = 0
    for i, k in enumerate(lengths):
        ids[i, :k], mask[i, :k] = row_ids[0, start : start + k], 1
        types[i, :k] = media["mm_token_type_ids"][0, start : start + k]
        start += k
    grids = {k: media[k] for k in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts") if k in media}
    positions, _ = rope_index(input_ids=ids, mm_token_type_ids=types, attention_mask=mask, **grids)
    return torch.cat([positions[:, i, :k] for i, k in enumerate(lengths)], dim=1)[:, None, :]


def media_of(features: list[dict[str, Any]], key: str = "images") -> list[str]:
    """The media paths of ``key`` of the samples, in sample order."""
    return [p for f in features for p in (f.get(key) or [])]


def with_media(
    batch: dict[str, Any], mm, rope_index, images: list[str], lengths: list[int], **media: list[str]
) -> dict[str, Any]:
    """``batch`` (one padding-free row: ``input_ids`` and ``position_ids`` ``[1, T]``) plus the media inputs of its
    samples (``images`` and ``media`` in sample order; ``lengths``: the samples' token counts), with M-RoPE positions
    ``[4, 1, T]`` when the model has ``rope_index`` (module docstring)."""
    import torch

    batch.update(mm.collate(images, batch["input_ids"], **{k: v for k, v in media.items() if v}))
    if "mm_token_type_ids" in batch:  # an M-RoPE family (the plugin marks its media tokens for get_rope_index)
        if rope_index is None:
            raise ValueError(
                f"a padding-free row of the {mm.NAME} family needs the model's get_rope_index (rope_index) "
                "for its 3-D positions"
            )
        rope = sample_rope_positions(rope_index, batch["input_ids"], lengths, batch)
        batch["position_ids"] = torch.cat([batch["position_ids"][None], rope.to(batch["position_ids"].dtype)], dim=0)
    return batch


@dataclass
class PaddingFreeCollator:
    """The micro-batch as one row of batch dimension 1: ``input_ids``, ``position_ids``, ``labels`` (no mask, no pads),
    plus the samples' media inputs with ``mm`` (a family plugin; ``rope_index``: the model's M-RoPE function).

    ``pad_token_id`` is kept for the trainer's helpers that look for it; no pad token is ever written."""

    pad_token_id: int | None = None
    label_pad_id: int = IGNORE_INDEX
    mm: Any = None
    rope_index: Any = None

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        ids, positions, labels = concatenate(
            [f["input_ids"] for f in features], [f.get("labels", f["input_ids"]) for f in features]
        )
        as_row = lambda values: torch.tensor(values, dtype=torch.long).unsqueeze(0)  # noqa: E731
        batch = {"input_ids": as_row(ids), "position_ids": as_row(positions), "labels": as_row(labels)}
        if "thought_mask" in features[0]:  # thought_loss_weight between 0 and 1 (train/thought_loss.py)
            batch["thought_mask"] = as_row([m for f in features for m in f["thought_mask"]])
        if self.mm is None:
            return batch
        lengths = [len(f["input_ids"]) for f in features if f["input_ids"]]
        return with_media(
            batch,
            self.mm,
            self.rope_index,
            media_of(features),
            lengths,
            videos=media_of(features, "videos"),
            audios=media_of(features, "audios"),
        )


def padding_free_collator(tokenizer, mm=None, model=None) -> PaddingFreeCollator:
    """The collator of ``padding_free: true``; with a media plugin ``mm`` the row carries the samples' media and, for a
    model with M-RoPE (``model``'s ``get_rope_index``), per-sample 3-D positions. Refused for
    :data:`REFUSED_FAMILIES`."""
    if mm is not None:
        refuse_family(mm, "padding_free")
    return PaddingFreeCollator(
        pad_token_id=tokenizer.pad_token_id, mm=mm, rope_index=rope_index_of(model) if mm else None
    )
