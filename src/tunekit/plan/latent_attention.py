"""Multi-head latent attention (DeepSeek-V2/V3) in the plan: its widths and what its forward keeps for backward
(derivation: docs/memory-model.md, section 3.1, "Multi-head latent attention").

Read off transformers 5's ``DeepseekV3Attention`` (V2's is the same but for the rotary layout), per token, with ``H``
heads, query/key head ``d = nope + rope`` (``qk_nope_head_dim + qk_rope_head_dim``), value head ``dv``, the query
compression ``ql`` (``q_lora_rank``; none: one ``q_proj``) and the key/value compression ``kr`` (``kv_lora_rank``),
``c`` the compute dtype's bytes:

* the input norm's output feeds ``q_a_proj`` (or ``q_proj``) and ``kv_a_proj_with_mqa`` (``h -> kr + rope``);
* ``q_a_layernorm`` (RMSNorm over ``ql``): its fp32 input ``4 ql`` and ``rstd`` (4), its output feeds ``q_b_proj``
  (``ql -> H d``); ``kv_a_layernorm`` over the ``kr`` part: its fp32 input (``4 kr``; without autocast the fp32 input
  is a view of the whole ``kr + rope`` projection, which it keeps: ``4 (kr + rope)``) and ``rstd``, its output feeds
  ``kv_b_proj`` (``kr -> H (nope + dv)``); a trained norm keeps its normalized value too;
* the query and key are new tensors (``cat`` of the rotated and plain parts; ``new_empty`` + ``copy_``), ``c H d``
  each, kept by the attention; the value is a view of ``kv_b_proj``'s output, so its whole storage ``c H (nope + dv)``
  stays; the output ``c H dv`` (the ``o_proj`` input) and the fp32 log-sum-exp ``4 H`` (SDPA) or the fp32 softmax
  and its ``c`` copy over the row (eager). The rotary products keep only the shared cos/sin.
* on the CPU, SDPA with ``d != dv`` runs its math path in fp32: the scaled query and key ``4 H d`` each, the value
  (an fp32 copy ``4 H dv``; in fp32 the view of ``kv_b_proj``'s output, ``4 H (nope + dv)``) and the probabilities
  ``4 H s`` over the row ``s``; its output is cast and made contiguous, a fresh ``c H dv`` that ``o_proj`` keeps when
  it trains or is adapted. (On CUDA SDPA's memory-efficient kernel takes different head widths.)
* under FlashAttention-2 (``flash_attn: fa2``, CUDA) with ``d != dv``, transformers' ``flash_attention_forward`` pads
  the value to ``d`` (``F.pad``: a new ``c H d``, which the kernel keeps; the view of ``kv_b_proj``'s output is then
  kept by nothing, as ``pad`` saves nothing) and slices the kernel's output back to ``dv``: flash-attn keeps the query,
  the key, the padded value and the padded output (``out_padded``), ``c H d`` each, and the fp32 log-sum-exp ``4 H``,
  no probabilities; the slice is made contiguous by the model's ``reshape(...).contiguous()``, a fresh ``c H dv`` that
  ``o_proj`` keeps when it trains or is adapted. (Unpadding copies q, k and v per token; the copies replace them.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Latent:
    """The widths of multi-head latent attention, from the model's config."""

    q_rank: int  # q_lora_rank: the query's compression (0: one q_proj, DeepSeek-V2-Lite)
    kv_rank: int  # kv_lora_rank: the keys' and values' compression
    nope: int  # qk_nope_head_dim
    rope: int  # qk_rope_head_dim
    v_dim: int  # v_head_dim

    @property
    def qk_dim(self) -> int:
        return self.nope + self.rope


def latent_dims(cfg: Any) -> Latent | None:
    """The latent attention widths of a model config; None for any other attention."""
    kv = getattr(cfg, "kv_lora_rank", None)
    if not isinstance(kv, int) or kv <= 0:
        return None
    return Latent(
        q_rank=int(getattr(cfg, "q_lora_rank", None) or 0),
        kv_rank=kv,
        nope=int(cfg.qk_nope_head_dim),
        rope=int(cfg.qk_rope_head_dim),
        v_dim=int(cfg.v_head_dim),
    )


def _norm(width: int, kept: int, in_bytes: int, trained: bool) -> int:
    """An inner RMSNorm over ``width``: its fp32 input (``kept`` wide) and rstd; the normalized value (in the input's
    dtype) when its weight trains."""
    return 4 * kept + 4 + (in_bytes * width if trained else 0)


def latent_saved_per_token(shape, setup, kind, norm_out: int, norm_rc: bool, consumers) -> float:
    """Bytes per token the latent attention of a layer keeps for backward, from its projections' inputs to
    ``o_proj``'s (``consumers(width, bytes, paths, already_saved)``: what the Linears on one input keep, as
    ``plan/activations.layer_saved_per_token`` counts them)."""
    lat, H, c, h = shape.latent, shape.heads, setup.compute_bytes, shape.hidden
    names = {lin.name: lin.path for lin in shape.linears if "attn" in lin.path}
    inner = max(c, setup.trainable_bytes) if kind.norms_trainable else c  # the inner norms' output
    first = [names[n] for n in ("q_a_proj", "q_proj", "kv_a_proj_with_mqa") if n in names]
    total = float(consumers(h, norm_out, first, norm_rc))
    if lat.q_rank:
        total += _norm(lat.q_rank, lat.q_rank, c, kind.norms_trainable)
        total += consumers(lat.q_rank, inner, [names["q_b_proj"]], False)
    kept = lat.kv_rank if c != 4 else lat.kv_rank + lat.rope  # fp32: the norm keeps the projection's view
    total += _norm(lat.kv_rank, kept, c, kind.norms_trainable)
    total += consumers(lat.kv_rank, inner, [names["kv_b_proj"]], False)
    if setup.host and setup.attn == "sdpa" and lat.qk_dim != lat.v_dim:  # the CPU's SDPA falls back to its math path
        v = lat.v_dim if c != 4 else lat.nope + lat.v_dim  # an fp32 copy of the value, or the view of kv_b's output
        total += 4 * H * (2 * lat.qk_dim + v + setup.row_len)  # scaled fp32 query and key, value, probabilities
        return total + consumers(H * lat.v_dim, c, [names["o_proj"]], False)  # the output: a fresh copy
    if setup.attn == "fa2" and lat.qk_dim != lat.v_dim:  # FlashAttention-2 pads the value to the query's width
        total += c * H * 4 * lat.qk_dim + 4 * H  # query, key, padded value, padded output; fp32 log-sum-exp
        return total + consumers(H * lat.v_dim, c, [names["o_proj"]], False)  # the sliced output: a fresh copy
    total += c * H * (2 * lat.qk_dim + lat.nope + lat.v_dim)  # query, key, the value's kv_b_proj output
    total += c * H * lat.v_dim  # the attention output, o_proj's input
    if setup.attn == "eager":
        total += (4 + (c if c != 4 else 0)) * H * setup.row_len  # fp32 softmax + probabilities in the compute dtype
    else:
        total += 4 * H  # fp32 log-sum-exp
    # under context parallelism o_proj's input is the exchange's output (train/engines/ulysses.py): a tensor apart
    return total + consumers(H * lat.v_dim, c, [names["o_proj"]], setup.cp_size == 1)
