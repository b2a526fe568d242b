"""Activation bytes of one training micro-step, term by term (derivation: docs/memory-model.md).

Two quantities:

* :func:`saved_bytes` -- what autograd keeps for backward at the end of the forward pass (checked on
  CPU against ``torch.autograd.graph.saved_tensors_hooks``, counting unique storages);
* :func:`dynamic_peak_bytes` -- the peak of everything that scales with the micro-batch, which is
  the saved bytes plus the transient peak of the backward pass (the loss over the vocabulary, or the
  one decoder layer being recomputed under gradient checkpointing).

Notation per token: h hidden, q = heads*head_dim, kv = kv_heads*head_dim, inter intermediate, a heads,
V vocabulary, c = bytes of the compute dtype, rd = bytes of the residual stream.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .architectures import ModelShape
from .latent_attention import latent_saved_per_token
from .moe_activations import (
    adapted_expert_paths,
    block_input_grad,
    routed_backward_transient,
    routed_saved_const,
    routed_saved_per_token,
    router_aux_saved,
)
from .params import ParamCounts, lm_frozen
from .prefix_activations import prefix_saved_bytes
from .training_setup import Setup

ATTN_OUT = ("o_proj", "dense", "out_proj", "wo")
MLP_OUT = ("down_proj", "fc2", "w2", "dense_4h_to_h")

# Constants of the peak model (docs/memory-model.md, section "Peak").
VOCAB_PEAK_PER_TOKEN = (
    14  # x V bytes: log_softmax output + nll grad + its input grad (12 V) + a 2 V block the allocator cannot reuse
)
RECOMPUTE_PEAK_FACTOR = 1.6  # one recomputed layer: its saved activations x 1.6 while its backward runs
NOGC_BACKWARD_EXTRA = 0.6  # without checkpointing: transient gradients of the layer being back-propagated


@dataclass(frozen=True)
class LayerKind:
    """How one decoder layer trains: which Linear paths are trainable (full) or adapted (LoRA)."""

    trainable: frozenset[str]  # Linear paths whose base weight trains (full / freeze)
    adapted: frozenset[str]  # Linear paths with a LoRA adapter
    norms_trainable: bool
    input_requires_grad: bool = True


def stream_bytes(setup: Setup, shape: ModelShape | None = None) -> int:
    """Bytes per element of the residual stream: the dtype of the embedding output.

    Full fine-tuning upcasts the embeddings to fp32; LoRA, QLoRA (model/finetuning.py keeps the
    unquantized weights in the load dtype) and freeze keep the load dtype (a trainable norm's fp32
    output only feeds Linears, whose autocast output is 16-bit again).
    """
    if setup.finetuning_type == "full" and not (shape is not None and lm_frozen(shape, setup)):
        return setup.trainable_bytes
    if "embed_tokens" in setup.freeze_extra or "embed_tokens" in setup.additional_target:
        return 4
    return int(setup.base_bytes)


def _norm_count(shape: ModelShape) -> int:
    return sum(1 for n, k in shape.layer_param_names if "norm" in n and k == shape.hidden) or 2


def _qk_norm(shape: ModelShape) -> bool:
    return any("q_norm" in n or "q_layernorm" in n for n, _ in shape.layer_param_names)


def layer_saved_per_token(shape: ModelShape, setup: Setup, kind: LayerKind, padded: bool | None = None) -> float:
    """Bytes per token one decoder layer keeps for backward (no checkpointing); ``shape``: the layer's own
    (``ModelShape.layer_at``)."""
    h, inter = shape.hidden, shape.intermediate
    c = setup.compute_bytes
    rd = stream_bytes(setup, shape)
    la = 4  # PEFT keeps adapters in fp32 (autocast_adapter_dtype)
    r = setup.lora_rank
    padded = (setup.padded if padded is None else padded) or setup.prompt[:1] == ("ptuning",)  # a prefix: masked
    if not kind.input_requires_grad and not kind.trainable and not kind.adapted:
        return 0.0  # below every trainable layer: no gradient flows here
    if shape.moe is not None and not block_input_grad(shape, kind):  # LoRA on the experts alone, the lowest layer:
        return routed_saved_per_token(shape, setup, kind, rd, False)  # no gradient before its sparse block
    total = 0.0
    # RMSNorms: an fp32 copy of the input (the input itself when fp32) and rstd; the normalized value when the
    # weight trains
    per_norm = 4 * h + 4 + (rd * h if kind.norms_trainable else 0)
    n_norms = _norm_count(shape)
    total += n_norms * per_norm
    if not kind.input_requires_grad:
        total -= 4 * h + 4  # the first norm's input needs no gradient: only its weight's input is kept

    mlp_rc, norm_rc = recomputed_parts(shape, setup)

    def consumers(width: int, xd: int, paths: list[str], already_saved: bool) -> float:
        shared = False
        extra = 0.0
        for path in paths:
            if path in kind.trainable:
                if setup.autocast and xd != c:
                    extra += c * width  # autocast makes a compute-dtype copy per Linear
                else:
                    shared = True
            elif path in kind.adapted:
                if setup.autocast:
                    if la != xd or c != xd:
                        extra += c * width  # PEFT casts x to fp32, autocast back: a fresh copy per adapter
                    else:
                        shared = True
                elif la != xd:
                    extra += la * width
                else:
                    shared = True
                extra += (c if setup.autocast else la) * r  # lora_A output, kept for lora_B
        return extra + (xd * width if shared and not already_saved else 0)

    mlp_in = [lin.path for lin in shape.linears if "attn" not in lin.path and lin.name not in MLP_OUT]
    mlp_out = [lin.path for lin in shape.linears if "attn" not in lin.path and lin.name in MLP_OUT]
    # the norm returns weight * normalized.to(input dtype): promoted to fp32 when its weight is an fp32 trainable
    norm_out = max(rd, setup.trainable_bytes) if kind.norms_trainable else rd
    if shape.latent is not None:  # DeepSeek's multi-head latent attention (plan/latent_attention.py)
        total += latent_saved_per_token(shape, setup, kind, norm_out, norm_rc, consumers)
    else:
        total += attention_saved(shape, setup, kind, padded, norm_out, norm_rc, consumers)
    if shape.moe is not None:  # a sparse layer: its MLP Linears are a shared expert's
        return total + moe_mlp_saved(shape, setup, kind, mlp_in, mlp_out, norm_out, norm_rc, consumers)
    # gated MLP: act(gate) input, act output and up output
    gated = len(mlp_in) >= 2 or any(lin.out_features == 2 * inter for lin in shape.linears if lin.path in mlp_in)
    mlp = (2 if mlp_rc else 3 if gated else 1) * c * inter  # elementwise_recompute: act(gate) is a recipe
    mlp += consumers(h, norm_out, mlp_in, norm_rc)
    mlp += consumers(inter, c, mlp_out, mlp_rc)  # ... and so is act(gate) * up
    return total + mlp


def attention_saved(shape: ModelShape, setup: Setup, kind: LayerKind, padded: bool, norm_out, norm_rc, consumers):
    """Bytes per token of a layer's attention (its projections' inputs to ``o_proj``'s): q, k, v, the output and
    SDPA's log-sum-exp, or eager's softmax over the row (gpt-oss: with a sink column); Qwen3's per-head q/k
    norms. Per token of the process under context parallelism too: 1/cp_size of the heads over the whole row hold
    as many bytes as all heads over the process's 1/cp_size of the positions."""
    h, q, kv, a, c = shape.hidden, shape.q_dim, shape.kv_dim, shape.heads, setup.compute_bytes
    attn_in = [lin.path for lin in shape.linears if "attn" in lin.path and lin.name not in ATTN_OUT]
    attn_out = [lin.path for lin in shape.linears if "attn" in lin.path and lin.name in ATTN_OUT]
    total = consumers(h, norm_out, attn_in, norm_rc)  # elementwise_recompute: the norm output is a recipe
    # attention core
    repeat = padded and setup.attn == "sdpa" and shape.kv_heads != shape.heads  # masked SDPA repeats k/v heads
    sinks = setup.attn == "eager" and _sinks(shape)
    if sinks:  # gpt-oss: one softmax over [scores, sink] in the scores' dtype, the sink column dropped after it
        total += sink_attention_saved(shape, setup, kind)
    elif setup.attn == "eager":
        s = setup.row_len  # scores span the row: the whole micro-batch when padding-free
        total += c * q * 3 + c * q  # q, repeated k and v, contiguous output
        total += (4 + (c if c != 4 else 0)) * a * s  # fp32 softmax + probabilities in the compute dtype
        if shape.attn_softcap:
            total += c * a * s  # tanh(scores / cap) output (Gemma 2)
    else:
        total += c * q + 2 * c * (q if repeat else kv) + c * q + 4 * a  # q, k, v, output, fp32 logsumexp
    if _qk_norm(shape):  # per-head RMSNorm of q and k (Qwen3): fp32 input copy + rstd, + normalized value if trained
        total += 4 * q + 4 * a + 4 * kv + 4 * shape.kv_heads
        if kind.norms_trainable:
            total += c * (q + kv)
    # with sinks, nothing but o_proj's consumers keeps the output; under context parallelism o_proj's input is the
    # exchange's output (train/engines/ulysses.py), a tensor apart from the one the attention kept
    total += consumers(q, c, attn_out, not sinks and setup.cp_size == 1)
    return total


def sink_attention_saved(shape: ModelShape, setup: Setup, kind: LayerKind) -> float:
    """Bytes per token of gpt-oss's eager attention core (``eager_attention_forward`` with ``s_aux``): the query,
    the repeated key and value (c q each), the probabilities over the row and the sink, c a (s + 1) (the softmax runs
    in the scores' dtype: no fp32 copy), and the int64 indices of the row max subtracted before it, 8 a. Each is kept
    only for the gradient of another: in the lowest adapted layer (no gradient at its input) a projection that does
    not train leaves its partner's operand unkept."""
    c, q, a = setup.compute_bytes, shape.q_dim, shape.heads

    def grad(name: str) -> bool:
        path = f"self_attn.{name}"
        return kind.input_requires_grad or path in kind.trainable or path in kind.adapted

    gq, gk, gv = grad("q_proj"), grad("k_proj"), grad("v_proj")
    scores = gq or gk  # the scores (and the probabilities' input) carry a gradient
    total = c * q * (gk + gq + scores)  # q for k's gradient, the repeated k for q's, the repeated v for the scores'
    total += c * a * (setup.row_len + 1) * (scores or gv)  # kept by the softmax and by the product with v
    return total + 8 * a * scores


def _sinks(shape: ModelShape) -> bool:
    """Attention with a learned sink logit per head (gpt-oss's ``self_attn.sinks``)."""
    return any(n.endswith("self_attn.sinks") for n, _ in shape.layer_param_names)


def rotary_width(shape: ModelShape) -> int:
    """Width of the cos/sin the rotary products keep (once for all layers): the head, or half of it where the
    frequencies are not duplicated (gpt-oss's ``_apply_rotary_emb`` rotates the two halves)."""
    return shape.head_dim // 2 if shape.model_type == "gpt_oss" else shape.head_dim


def moe_mlp_saved(shape: ModelShape, setup: Setup, kind: LayerKind, mlp_in, mlp_out, norm_out, norm_rc, consumers):
    """A sparse block per token: a shared expert (Qwen2-MoE: a gated MLP of its own width, whose output its sigmoid
    gate scales, ``c h + c``) with its Linears' inputs, then the router and routed experts (``plan/moe_activations``).
    ``elementwise_recompute`` does not reach an MoE block's MLP (it has no gate/up/down Linears of its own)."""
    c, h = setup.compute_bytes, shape.hidden
    width = sum(lin.in_features for lin in shape.linears if lin.path in mlp_out)
    total = 3 * c * width + consumers(h, norm_out, mlp_in, norm_rc) + consumers(width, c, mlp_out, False)
    if any(lin.name == "shared_expert_gate" for lin in shape.linears):
        total += c * h + c
    shared_norm = norm_rc or (bool(mlp_in) and bool(kind.trainable) and not (setup.autocast and norm_out != c))
    return total + routed_saved_per_token(shape, setup, kind, norm_out, shared_norm)


def recomputed_parts(shape: ModelShape, setup: Setup) -> tuple[bool, bool]:
    """What ``elementwise_recompute`` (model/elementwise_recompute.py) saves as recipes in a layer that is not
    checkpointed: ``(the gated MLP's act output and product, the RMSNorm outputs)``. The MLP needs gate/up/down
    Linears; the norms are RMSNorms (no bias). Only tensors saved as they are (not a cast copy) become recipes:
    ``consumers`` counts copies apart."""
    mlp_on, norms_on = setup.recompute
    names = {lin.name for lin in shape.linears if "attn" not in lin.path}
    rms = not any(n.endswith("layernorm.bias") for n, _ in shape.layer_param_names)
    return mlp_on and {"gate_proj", "up_proj", "down_proj"} <= names, norms_on and rms


def layer_saved_const(shape: ModelShape, setup: Setup, kind: LayerKind) -> float:
    """Bytes per layer that do not scale with tokens: autocast's 16-bit copies of fp32 weights; a sparse layer's
    adapted fused experts (``plan/moe_activations.py``)."""
    moe = routed_saved_const(shape, setup, kind)
    if not setup.autocast:
        return moe
    c = setup.compute_bytes
    total = moe
    for lin in shape.linears:
        if lin.path in kind.trainable and setup.trainable_bytes != c:
            total += c * lin.params
        if lin.path in kind.adapted:
            total += c * setup.lora_rank * (lin.in_features + lin.out_features)
    return total


def checkpointed_layers(shape: ModelShape, setup: Setup) -> int:
    """Decoder layers that keep only their input and recompute in backward (the lowest ``ckpt_layers``, or all)."""
    if not setup.grad_ckpt:
        return 0
    return shape.layers if setup.ckpt_layers is None else max(0, min(shape.layers, setup.ckpt_layers))


def chunked_head(shape: ModelShape, setup: Setup) -> bool:
    """Whether the LM head + loss run in chunks (train/chunked_head.py): as the run decided (``setup.chunked_loss``,
    ``RunDecisions.chunked_lm_head``), where the head allows it: not soft-capped logits or a PEFT-wrapped head."""
    wrapped = any(n in ("lm_head", "embed_tokens") for n in setup.additional_target)
    return setup.chunked_loss and not shape.logit_softcap and not wrapped


def head_saved_per_token(
    shape: ModelShape,
    setup: Setup,
    counts: ParamCounts,
    lm_head_trainable: bool,
    final_norm_trainable: bool,
    embed_trainable: bool,
    rd: int,
) -> float:
    h, V, c = shape.hidden, shape.vocab, setup.compute_bytes
    total = 4 * h + 4 + (rd * h if final_norm_trainable else 0)
    if chunked_head(
        shape, setup
    ):  # only d loss / d hidden of the trained rows is held (d W is a constant, see saved_bytes)
        return total + rd * h + 8 + (8 if embed_trainable else 0)
    if lm_head_trainable:
        total += c * h if (setup.autocast and rd != c) else rd * h
    if setup.liger_loss:
        total += c * h  # fused linear cross-entropy keeps only the input gradient
    else:
        total += 4 * V  # fp32 log_softmax output
        if shape.logit_softcap:
            total += c * V
    total += 8  # int64 shifted labels
    if embed_trainable:
        total += 8  # input ids for the embedding gradient
    return total


def layer_kinds(shape: ModelShape, setup: Setup, counts: ParamCounts) -> list[LayerKind]:
    paths = frozenset(p for view, _ in shape.variants() for p in _own_paths(view))
    if lm_frozen(shape, setup):  # only the vision side trains: gradients flow through every frozen layer to the images
        return [LayerKind(frozenset(), frozenset(), False) for _ in range(shape.layers)]
    if setup.finetuning_type == "full":
        return [LayerKind(paths, frozenset(), True) for _ in range(shape.layers)]
    if setup.finetuning_type in ("ptuning", "prompt"):  # no weight trains; the gradient reaches every layer's input
        return [LayerKind(frozenset(), frozenset(), False) for _ in range(shape.layers)]
    if setup.finetuning_type == "lora":
        adapted = frozenset(counts.adapted_per_layer) | adapted_expert_paths(shape, setup)  # + fused experts
        kinds, grad = [], setup.grad_ckpt or counts.media_grad
        for i in range(shape.layers):  # a layer's input carries a gradient once an adapter sits below it
            own = adapted & _own_paths(shape.layer_at(i))
            kinds.append(LayerKind(frozenset(), own, False, input_requires_grad=grad))
            grad = grad or bool(own)
        return kinds
    ids = set(counts.trainable_layer_ids)
    lowest = min(ids)
    kinds = []
    for i in range(shape.layers):
        if i in ids:
            kinds.append(LayerKind(paths, frozenset(), True, input_requires_grad=i > lowest))
        elif i > lowest:  # frozen, but gradients flow through it to the trainable layers below
            kinds.append(LayerKind(frozenset(), frozenset(), False))
        else:
            kinds.append(LayerKind(frozenset(), frozenset(), False, input_requires_grad=False))
    return kinds


def _own_paths(shape: ModelShape) -> frozenset[str]:
    """The Linear and fused-expert paths a layer of this structure has."""
    fused = {f.path for f in shape.moe.fused} if shape.moe is not None else set()
    return frozenset(lin.path for lin in shape.linears) | fused


def _head_flags(shape: ModelShape, setup: Setup) -> tuple[bool, bool, bool]:
    if lm_frozen(shape, setup):
        return False, False, False
    if setup.finetuning_type == "full":
        return True, True, True
    names = set(setup.additional_target) | set(setup.freeze_extra)
    return (
        ("lm_head" in names or (shape.tied and "embed_tokens" in names)),
        ("norm" in names),
        ("embed_tokens" in names),
    )


def saved_bytes(shape: ModelShape, setup: Setup, counts: ParamCounts, padded: bool | None = None) -> dict[str, float]:
    """Bytes held for backward after the forward pass of one micro-batch (``layers``, ``head``, ``total``)."""
    T = setup.tokens
    kinds = layer_kinds(shape, setup, counts)
    lm_tr, norm_tr, emb_tr = _head_flags(shape, setup)
    rd_last = stream_bytes(setup, shape)
    ck = checkpointed_layers(shape, setup)
    layers = float(
        rd_last * shape.hidden * T * ck
    )  # a checkpointed layer keeps only its input (cos/sin travel as kwargs)
    if ck < shape.layers:  # the layers above keep everything their backward needs
        layers += sum(
            layer_saved_per_token(shape.layer_at(i), setup, k, padded) * T
            + layer_saved_const(shape.layer_at(i), setup, k)
            for i, k in enumerate(kinds)
            if i >= ck
        )
        layers += 2 * rd_last * rotary_width(shape) * T
        layers += prefix_saved_bytes(shape, setup, shape.layers - ck)  # a ptuning prefix's keys, values, mask, encoder
    layers += router_aux_saved(shape, setup, kinds)  # moe_aux_loss_coef: every sparse layer's router softmax
    head = head_saved_per_token(shape, setup, counts, lm_tr, norm_tr, emb_tr, rd_last) * T
    if lm_tr and chunked_head(shape, setup):
        head += 4 * shape.hidden * shape.vocab  # the chunked head's fp32 d W, computed in the forward pass
    if lm_tr and setup.autocast and setup.trainable_bytes != setup.compute_bytes:
        head += setup.compute_bytes * shape.hidden * shape.vocab  # autocast's 16-bit copy of the fp32 lm_head
    return {"layers": layers, "head": head, "total": layers + head}


def dynamic_peak_bytes(shape: ModelShape, setup: Setup, counts: ParamCounts) -> dict[str, float]:
    """Peak of the token-dependent memory: ``activations`` (layers) and ``logits`` (loss over the vocabulary)."""
    T = setup.tokens
    kinds = layer_kinds(shape, setup, counts)
    typical, last = kinds[-1], shape.layer_at(len(kinds) - 1)
    # the transients of one layer's backward (or its recompute) hold what recipes rebuild too
    a_layer = layer_saved_per_token(last, replace(setup, recompute=(False, False)), typical)
    saved = saved_bytes(shape, setup, counts)
    h, V, c = shape.hidden, shape.vocab, setup.compute_bytes
    if setup.liger_loss:
        chunk_rows = min(T, 1 << max(0, (max(1, -(-T // max(1, -(-V // h)))) - 1).bit_length()))
        vocab = c * h * T + chunk_rows * V * 10  # grad_input + one chunk of logits (16-bit, fp32, grad)
    elif chunked_head(
        shape, setup
    ):  # one chunk of fp32 logits (turned into its gradient in place) + its compute-dtype copies
        from ..train.chunked_head import chunk_rows

        rows = min(T, chunk_rows(V))
        vocab = rows * V * (4 + (2 * c if c != 4 else 0)) + 4 * h * rows
    else:
        vocab = (VOCAB_PEAK_PER_TOKEN * V + (c * V if shape.logit_softcap else 0)) * T
    eps = 6 * h * T  # final-norm input, embedding-grad leftovers
    base = saved["layers"]
    ck = checkpointed_layers(shape, setup)
    phases = []
    if ck < shape.layers:  # back-propagating a layer that kept its activations (+ an adapted fused expert's gradient)
        phases.append(NOGC_BACKWARD_EXTRA * a_layer * T + routed_backward_transient(last, setup, typical))
    if ck:  # recomputing one of the lowest ck layers: the layers above have freed theirs by then
        aux = router_aux_saved(shape, setup, kinds)  # its gradients wait at every router until that layer's backward
        above = base - stream_bytes(setup, shape) * h * T * ck - aux
        phases.append(RECOMPUTE_PEAK_FACTOR * (a_layer * T + layer_saved_const(last, setup, typical)) - above)
    layer_phase = max(phases)
    if vocab + eps >= layer_phase:
        return {"activations": base + eps, "logits": vocab, "saved": saved["total"]}
    return {"activations": base + layer_phase, "logits": 0.0, "saved": saved["total"]}
