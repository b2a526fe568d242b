"""Activations of a mixture-of-experts layer: the router and the routed experts (derivation: docs/memory-model.md,
section 3.1, "Mixture-of-experts layers").

Read off transformers 5's forward of Qwen3-MoE, Qwen2-MoE and Mixtral (``TopKRouter`` + ``integrations/moe.py``
``grouped_mm_experts_forward``, the default ``experts_implementation``), per token of a sparse layer with ``E``
experts, top ``k``, hidden ``h`` and expert width ``W``; ``S = k`` routed rows per token:

* router: the fp32 softmax output ``4E`` and the top-k indices ``8k``; ``4 + 4k`` more where the top-k weights are
  renormalised (``norm_topk_prob``, always in Mixtral: the divisor and the values before the in-place division); a
  trained router (full / freeze) keeps its input too;
* experts, in the bytes ``e`` of their weights (``grouped_mm`` is not autocast: it runs in the weights' dtype): the
  gathered hidden states ``e h k`` and the up/gate output ``2 e W k`` (grouped_mm and act keep them), act's output and
  the product ``2 e W k`` (the gathered rows and the product only when the expert weights train or are adapted: a
  frozen weight's grouped matmul keeps just the weight), the down output ``e h k`` (kept for the routing weights'
  gradient), the routing weights
  ``k`` x (4 in Mixtral, which keeps them fp32, else the router logits' bytes) and three int64 row indices ``24 k``
  (the gather, the sort and the inverse permutation);
* per layer, constant: int32 offsets ``4E``; with LoRA on a fused weight (PEFT ``target_parameters``) the adapted
  weight ``W + s B A`` that PEFT forms in the weights' dtype in every forward (``baddbmm``) and grouped_mm keeps,
  ``e E out in``, and the two factors cast to that dtype, ``e E r (in + out)`` (no copy when it is fp32, as they
  are); its gradient, of the same size, is the
  transient of that layer's backward;
* with the router auxiliary loss (``moe_aux_loss_coef``): the softmax of each sparse layer's router logits that the
  loss keeps, ``c E`` per token (:func:`router_aux_saved`).

gpt-oss (``GptOssTopKRouter``, ``GptOssExperts._apply_gate``; docs/memory-model.md, "gpt-oss"): the router's softmax
runs over the top-k logits only, in their dtype (``8k + l k``: no ``4E`` output, no renormalisation); the clamped
SwiGLU keeps the whole gate/up output (its clamps' input, ``2 e W k``) and four ``e W k`` tensors (the clamped gate,
its sigmoid, ``up + 1`` and the gated product ``glu``) where the plain ``act(gate) * up`` keeps one; trained expert
biases add the sorted expert ids their gathers keep, ``8k``.
"""

from __future__ import annotations

from .architectures import ModelShape
from .moe import Fused, adapted_fused
from .training_setup import Setup


def expert_bytes(setup: Setup, kind) -> int:
    """Bytes per element of the experts' weights, the dtype their grouped matmuls run in (autocast does not reach
    them): tunekit's fp32 (or DeepSpeed's 16-bit) trainable weights, else the load dtype."""
    return setup.trainable_bytes if kind.trainable else int(setup.base_bytes)


def expert_width(shape: ModelShape) -> int:
    """``W``: the width of one routed expert: the fused down projection's dimension that is not the hidden size (its
    input; gpt-oss stores it transposed), else from the routed parameters of a gated expert (``3 h W`` each)."""
    moe, h = shape.moe, shape.hidden
    down = next((f for f in moe.fused if f.name == "down_proj"), None)
    if down is not None:
        return down.in_features if down.out_features == h else down.out_features
    return moe.routed // max(1, moe.sparse_layers * moe.experts * 3 * h)


def gpt_oss_routing(shape: ModelShape) -> bool:
    """gpt-oss's sparse block: a router with a bias whose softmax runs over the top-k logits only, and experts with
    biases whose activation is the clamped SwiGLU (alpha 1.702, limit 7) over interleaved gate/up columns."""
    return shape.moe is not None and shape.model_type == "gpt_oss"


def adapted_expert_paths(shape: ModelShape, setup: Setup) -> frozenset[str]:
    """The fused expert weights LoRA adapts in a sparse layer, by path inside the layer ("mlp.experts.down_proj"):
    part of the layer's adapted paths (``activations.LayerKind.adapted``) beside its adapted Linears."""
    if shape.moe is None or setup.finetuning_type != "lora":
        return frozenset()
    return frozenset(f.path for f in adapted_fused(shape.moe, setup.lora_targets))


def _adapted(shape: ModelShape, kind) -> tuple[Fused, ...]:
    """The fused expert weights with a LoRA pair in a layer of ``kind`` (``activations.LayerKind``)."""
    return tuple(f for f in shape.moe.fused if f.path in kind.adapted)


def block_input_grad(shape: ModelShape, kind) -> bool:
    """Whether the sparse block's input carries a gradient: the layer's input does, or something before the block in
    the layer trains (its attention's adapters, trained weights)."""
    attention = {lin.path for lin in shape.linears if "attn" in lin.path}
    return kind.input_requires_grad or bool(kind.trainable) or bool(attention & kind.adapted)


def routed_saved_per_token(shape: ModelShape, setup: Setup, kind, norm_out: int, norm_saved: bool) -> float:
    """Bytes per token the router and the routed experts of a sparse layer keep for backward.

    ``norm_out``: bytes of the block's input (the second norm's output); ``norm_saved``: that tensor is already kept
    by another consumer (a dense/shared MLP Linear) or rebuilt by ``elementwise_recompute``. A block whose input
    carries no gradient (the lowest layer of LoRA on the experts alone, without checkpointing) keeps only what its
    adapted weights' gradients need: no router, no down output, one index."""
    moe = shape.moe
    if moe is None or (not kind.input_requires_grad and not kind.trainable and not kind.adapted):
        return 0.0
    h, k, E, c = shape.hidden, moe.top_k, moe.experts, setup.compute_bytes
    W, e, oss = expert_width(shape), expert_bytes(setup, kind), gpt_oss_routing(shape)
    logits = c if setup.autocast else norm_out
    weights = 4 if moe.fp32_scores else logits
    act = (6 if oss else 3) * W  # the gate/up output and what the activation keeps beside it (clamped SwiGLU: 4 W)
    if not block_input_grad(shape, kind):
        first = _adapted(shape, kind)[:1] == moe.fused[:1]  # the up projection trains: all after it carries
        return (e * k * (h + act + W) + weights * k + 8 * k) if first else 0.0
    # the fp32 softmax over E, the top-k indices, a renormalisation; gpt-oss: the indices, a softmax over the k chosen
    router = (8 * k + logits * k) if oss else 4 * E + 8 * k + ((4 + 4 * k) if moe.normalized else 0)
    if kind.trainable:  # the router's weight trains: its input (an autocast copy, or the norm output itself)
        if setup.autocast and norm_out != c:
            router += c * h
        elif not norm_saved:
            router += norm_out * h
    experts = e * k * (h + act) + weights * k + 24 * k
    if kind.trainable or _adapted(shape, kind):  # the weights' gradient needs both grouped matmuls' inputs
        experts += e * k * (h + W)
    if kind.trainable and oss:  # the trained biases' gathers keep the sorted expert ids
        experts += 8 * k
    return float(router + experts)


def routed_saved_const(shape: ModelShape, setup: Setup, kind) -> float:
    """Bytes per sparse layer that do not scale with tokens: the grouped matmuls' offsets, the
    adapted fused weights PEFT forms in every forward and their cast LoRA factors, and a trained router's autocast
    copy."""
    moe = shape.moe
    if moe is None or (not kind.input_requires_grad and not kind.trainable and not kind.adapted):
        return 0.0
    e, r = expert_bytes(setup, kind), setup.lora_rank
    total = 4.0 * moe.experts
    for f in _adapted(shape, kind):
        kept = block_input_grad(shape, kind) or f != moe.fused[0]  # the up projection's input needs no gradient: no W'
        cast = e != 4  # PEFT casts its fp32 factors to the weight's dtype: a copy unless that is fp32 too
        total += e * f.experts * (f.out_features * f.in_features * kept + r * (f.in_features + f.out_features) * cast)
    if kind.trainable and setup.autocast and setup.trainable_bytes != setup.compute_bytes:
        total += setup.compute_bytes * moe.experts * shape.hidden
    return float(total)


def routed_backward_transient(shape: ModelShape, setup: Setup, kind) -> float:
    """The largest tensor a sparse layer's backward allocates beyond what it saved: the gradient of the largest
    adapted fused weight (``E x out x in`` in the weights' dtype), reduced to the LoRA factors' gradients next."""
    if shape.moe is None:
        return 0.0
    fused = _adapted(shape, kind)
    return float(
        max((expert_bytes(setup, kind) * f.experts * f.out_features * f.in_features for f in fused), default=0)
    )


def router_aux_saved(shape: ModelShape, setup: Setup, kinds) -> float:
    """Bytes the router auxiliary loss keeps for backward (``moe_aux_loss_coef``: ``output_router_logits``):
    transformers' ``load_balancing_loss_func`` takes a softmax of each sparse layer's router logits, in their dtype
    (the compute dtype), whose output it keeps: ``tokens x experts x c`` per sparse layer whose logits carry a
    gradient. Backward frees them first, and their gradients, as large, wait at each layer's router until that
    layer's backward: held through the backward, a checkpointed layer's recompute included. The logits themselves
    live in the model's output until the loss is returned (freed before backward); the top-k indices each layer's
    ``topk`` keeps go with its discarded values."""
    moe = shape.moe
    if moe is None or not setup.router_aux:
        return 0.0
    layers = sum(1 for i, kind in enumerate(kinds) if _sparse_with_grad(shape.layer_at(i), kind))
    return float(setup.tokens * moe.experts * setup.compute_bytes * layers)


def _sparse_with_grad(layer: ModelShape, kind) -> bool:
    return layer.moe is not None and block_input_grad(layer, kind)
