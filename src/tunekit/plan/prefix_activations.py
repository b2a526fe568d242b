"""Activations of P-Tuning v2 (``finetuning_type: ptuning``, PEFT's prefix tuning) beyond the model's own (derivation:
docs/memory-model.md, section 3.1, "P-Tuning v2 and prompt tuning").

The prefix reaches every layer as a KV cache of ``P = pre_seq_len`` positions per sequence, which the attention puts
in front of the row's own keys and values (``DynamicCache.update``: a concatenation), so with ``B`` sequences of ``s``
tokens each layer's attention keeps, on top of the per-token terms of section 3.1:

* the prefix's keys and values, ``2 c w P B``, ``w`` the key/value width (``q`` where SDPA repeats the kv heads: it
  always gets a mask here, as the prefix rules out its causal shortcut);
* the additive mask SDPA builds from the boolean one in the compute dtype, ``c s (P + s) B``, one per layer
  (measured on the CPU kernel); eager attention (which always repeats the kv heads) instead keeps each query's
  scores over the prefix too, the fp32 softmax and the probabilities, ``(4 + c) a P s B`` (``4`` in fp32).

The prefix itself comes from PEFT's prefix encoder once per micro-batch (for ``B`` sequences): the embedding's
indices ``8 P B``; with ``prefix_projection`` the MLP ``kv -> Hp -> layers x 2 x kv`` keeps its input ``x kv P B``
and the tanh output ``x Hp P B`` (``x``: fp32, or the compute dtype under autocast, which also keeps the 16-bit
copies of its two weights).

Multi-head latent attention (DeepSeek-V2/V3) caches a compressed latent and a shared rotary key, one head each,
which PEFT's per-head prefix does not fit: ``tunekit train`` refuses ``ptuning`` there before the model loads
(``model/prompt_adapters.check_prefix_attention``), and the plan refuses it with the same message.

Prompt tuning (``finetuning_type: prompt``) needs no term of its own: its ``num_virtual_tokens`` run in front of
every row as ordinary positions, so the plan's rows are that much longer (``training_setup.memory_seq_len``).
"""

from __future__ import annotations

from ..model.prompt_adapters import check_prefix_attention
from .architectures import ModelShape
from .training_setup import Setup


def prefix_saved_bytes(shape: ModelShape, setup: Setup, layers: int) -> float:
    """Bytes a micro-batch keeps for backward because of a ``ptuning`` prefix: its keys, values and mask in each of
    ``layers`` layers that keep activations, and the prefix encoder's activations; 0 for any other method."""
    if not setup.prompt or setup.prompt[0] != "ptuning":
        return 0.0
    if shape.latent is not None:  # no prefix fits latent attention's cache: refused as training refuses it
        lat = shape.latent
        check_prefix_attention(
            "ptuning", dict(model_type=shape.model_type, kv_lora_rank=lat.kv_rank, qk_rope_head_dim=lat.rope)
        )
    _, P, projection, hidden = setup.prompt
    c, s = setup.compute_bytes, setup.row_len
    B = 1 if setup.padding_free else setup.micro_batch  # sequences: one row when padding-free
    repeat = setup.attn == "eager" or (setup.attn == "sdpa" and shape.kv_heads != shape.heads)
    per_layer = 2 * c * (shape.q_dim if repeat else shape.kv_dim) * P * B
    if setup.attn == "sdpa":
        per_layer += c * s * (P + s) * B
    elif setup.attn == "eager":  # each query's scores span the prefix too: fp32 softmax + probabilities
        per_layer += (4 + (c if c != 4 else 0)) * shape.heads * P * s * B
    encoder = 8 * P * B
    if projection:
        kv, hp = shape.kv_dim, hidden or shape.kv_dim
        x = c if setup.autocast else 4
        encoder += x * (kv + hp) * P * B
        if setup.autocast:
            encoder += c * (kv * hp + hp * shape.layers * 2 * kv)
    return per_layer * layers + encoder
