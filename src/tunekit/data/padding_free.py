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
up to the floating-point summation order (tests/test_padding_free.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

IGNORE_INDEX = -100


def concatenate(rows: list[list[int]], labels: list[list[int]] | None = None) -> tuple[list[int], list[int], list[int]]:
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


@dataclass
class PaddingFreeCollator:
    """The micro-batch as one row of batch dimension 1: ``input_ids``, ``position_ids``, ``labels`` (no mask, no pads).

    ``pad_token_id`` is kept for the trainer's helpers that look for it; no pad token is ever written."""

    pad_token_id: int | None = None
    label_pad_id: int = IGNORE_INDEX

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        ids, positions, labels = concatenate([f["input_ids"] for f in features],
                                             [f.get("labels", f["input_ids"]) for f in features])
        as_row = lambda values: torch.tensor(values, dtype=torch.long).unsqueeze(0)  # noqa: E731
        return {"input_ids": as_row(ids), "position_ids": as_row(positions), "labels": as_row(labels)}


def padding_free_collator(tokenizer, mm=None) -> PaddingFreeCollator:
    """The collator of ``padding_free: true``; refused for a vision-language model (media rows not concatenated yet)."""
    if mm is not None:
        from ..errors import ConfigError

        raise ConfigError("padding_free does not support vision-language models yet (their image features and M-RoPE "
                          "positions are not concatenated per sample): remove padding_free for this model.")
    return PaddingFreeCollator(pad_token_id=tokenizer.pad_token_id)
