"""Mixture-of-experts models in the plan: total vs active parameters and the LoRA adapters on fused experts.

Read off the same meta-device model as the rest of the shape (``plan/architectures.py``), with the layout
``model/moe.py`` finds (sparse blocks, their ``experts``, routers and shared experts):

- **total**: every parameter, all experts included (what the weights, gradients of full fine-tuning and the optimizer
  states hold);
- **active per token**: total minus the routed experts a token does not reach: in each sparse layer, of ``E`` experts
  of ``P / E`` parameters each, a token goes through its top ``k``, so ``P (E - k) / E`` parameters sit idle for it.
  Attention, embeddings, routers and a shared expert are always active. (Qwen3-30B-A3B: 30.53B total, 3.35B
  active.)

LoRA on the fused expert weights (PEFT ``target_parameters``, ``model/moe.py``) gives each ``E x out x in`` tensor one
pair ``A: in -> r E``, ``B: r E -> out``: ``r E (in + out)`` parameters in two tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.moe import MoeLayout, in_layer, peft_remapped_linears


@dataclass(frozen=True)
class Fused:
    """One fused expert weight of a sparse layer, as PEFT adapts it (``experts x out x in``)."""

    path: str  # inside the decoder layer: "mlp.experts.gate_up_proj"
    experts: int
    in_features: int
    out_features: int

    @property
    def name(self) -> str:
        return self.path.split(".")[-1]

    def lora_params(self, rank: int) -> int:
        return rank * self.experts * (self.in_features + self.out_features)


@dataclass(frozen=True)
class MoeCounts:
    experts: int  # routed experts per sparse layer
    top_k: int  # experts per token
    sparse_layers: int
    total: int  # every parameter of the language model
    routed: int  # the routed experts' parameters, all sparse layers
    routers: int  # the routers' parameters (gate, shared_expert_gate, ...)
    fused: tuple[Fused, ...] = ()  # the fused expert weights of one sparse layer
    router_paths: tuple[str, ...] = ()  # the routers inside a decoder layer ("mlp.gate"): never adapted
    unadapted: tuple[str, ...] = ()  # linear layers LoRA leaves out: PEFT reads their names as the experts (DeepSeek)
    normalized: bool = True  # the top-k routing weights are renormalised (norm_topk_prob; Mixtral always)
    fp32_scores: bool = False  # the routing weights stay fp32 (Mixtral), else the router logits' dtype

    @property
    def active(self) -> int:
        """Parameters one token goes through: the idle experts' share of ``routed`` taken away."""
        return self.total - self.routed // self.experts * (self.experts - self.top_k)

    def to_dict(self) -> dict:
        return {
            "experts": self.experts,
            "experts_per_token": self.top_k,
            "sparse_layers": self.sparse_layers,
            "total_params": self.total,
            "active_params": self.active,
            "routed_expert_params": self.routed,
            "router_params": self.routers,
        }


def moe_counts(model, layout: MoeLayout | None, total: int, within: tuple[str, ...] | None = None) -> MoeCounts | None:
    """The experts (``layout``: ``model/moe.moe_layout``) of a (meta) causal LM whose language model has ``total``
    parameters; None for a dense model."""
    if layout is None or not layout.blocks:
        return None
    blocks = [b for b in layout.blocks if within is None or any(b == p or b.startswith(p + ".") for p in within)]
    if not blocks:
        return None
    params = dict(model.named_parameters())

    def size(prefixes) -> int:
        return sum(
            p.numel() for n, p in params.items() if "lora_" not in n and any(n.startswith(x + ".") for x in prefixes)
        )

    first = blocks[0]
    fused = tuple(
        Fused(in_layer(name), shape[0], shape[2], shape[1])
        for name, shape in layout.fused.items()
        if name.startswith(first + ".")
    )
    return MoeCounts(
        experts=layout.experts,
        top_k=layout.top_k,
        sparse_layers=len(blocks),
        total=total,
        routed=size([f"{b}.experts" for b in blocks]),
        routers=size([r for r in layout.routers if any(r.startswith(b + ".") for b in blocks)]),
        fused=fused,
        router_paths=tuple(layout.router_paths),
        unadapted=_unadapted(model),
        **_routing(model, [r for r in layout.routers if r.startswith(first + ".")]),
    )


def _unadapted(model) -> tuple[str, ...]:
    """The linear layers inside a decoder layer that ``model/moe.py`` keeps out of LoRA (``peft_remapped_linears``)."""
    names = set(peft_remapped_linears(model))
    return tuple(sorted({in_layer(n) for n, _ in model.named_modules() if n.split(".")[-1] in names}))


def _routing(model, routers: list[str]) -> dict[str, bool]:
    """How the top-k router of a sparse block hands over its weights (``MoeCounts.normalized`` / ``fp32_scores``):
    the router's own ``norm_topk_prob`` (a router without it, Mixtral's, always renormalises), and the dtype of the
    weights it returns for 16-bit input, read by running it on two rows where its weight is (the planner's meta device:
    no memory, no compute)."""
    import torch

    router = next((model.get_submodule(r) for r in routers if hasattr(model.get_submodule(r), "top_k")), None)
    if router is None:
        return {}
    weight = next(router.parameters(), None)
    try:
        out = router(torch.zeros(2, weight.shape[-1], device=weight.device, dtype=weight.dtype))
        fp32 = weight.dtype != torch.float32 and isinstance(out, tuple) and out[1].dtype == torch.float32
    except (RuntimeError, TypeError, NotImplementedError, AttributeError, IndexError):
        fp32 = False
    return {"normalized": bool(getattr(router, "norm_topk_prob", True)), "fp32_scores": fp32}


def _billions(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"


def moe_line(moe: dict) -> str:
    """The plan's line about a mixture of experts (``ModelShape.to_dict()["moe"]``)."""
    return (
        f"mixture of experts: {_billions(moe['total_params'])} parameters in total, "
        f"{_billions(moe['active_params'])} active per token ({moe['experts_per_token']} of {moe['experts']} experts "
        f"in each of {moe['sparse_layers']} sparse layers; routed experts {_billions(moe['routed_expert_params'])})"
    )


def adapted_fused(moe: MoeCounts, targets: tuple[str, ...] | None) -> tuple[Fused, ...]:
    """The fused expert weights of a sparse layer that ``lora_target`` reaches (``targets`` None = all; ``experts`` =
    every fused weight; else by last name)."""
    return tuple(f for f in moe.fused if targets is None or "experts" in targets or f.name in targets)


def expert_lora(moe: MoeCounts | None, targets: tuple[str, ...] | None, rank: int) -> tuple[int, int, int]:
    """``(parameters per sparse layer, tensors per sparse layer, largest tensor)`` of LoRA on the fused experts that
    ``lora_target`` reaches (``targets`` None = all; ``experts`` = every fused weight; else by last name)."""
    if moe is None:
        return 0, 0, 0
    hit = adapted_fused(moe, targets)
    params = sum(f.lora_params(rank) for f in hit)
    largest = max((rank * f.experts * max(f.in_features, f.out_features) for f in hit), default=0)
    return params, 2 * len(hit), largest
