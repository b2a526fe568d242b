"""Tiny mixture-of-experts families: transformers' native MoE classes with a few small experts and a top-k router.

Each family is the structural flags of a published checkpoint (its ``config.json``), registered in
:data:`tunekit.tiny.text.FAMILIES`; :func:`tunekit.tiny.config.shrink_config` makes them tiny (4 experts, top-2
routing, small expert MLPs, the shared expert where the family has one). ``--like`` names reach them through
:mod:`tunekit.tiny.names` (``qwen3-30b-a3b``, ``qwen2-57b-a14b``, ``mixtral-8x7b``).

In transformers 5 these families keep their experts fused: one 3-D parameter per layer for the gate and up projections
of every expert (``mlp.experts.gate_up_proj``: experts x 2 x expert width x hidden) and one for the down projections
(``mlp.experts.down_proj``); the router (``mlp.gate``) is a weight matrix, not an ``nn.Linear``.
"""

from __future__ import annotations

from typing import Any

#: family key -> (transformers model_type, tokenizer family, structural config fields)
MOE_FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    # Qwen3-30B-A3B / Qwen3-235B-A22B: every layer sparse, no shared expert
    "qwen3_moe": (
        "qwen3_moe",
        "qwen3",
        {
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "attention_bias": False,
            "rope_theta": 1000000.0,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 768,
            "norm_topk_prob": True,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
        },
    ),
    # Qwen1.5-MoE-A2.7B / Qwen2-57B-A14B: routed experts plus one shared expert with its own sigmoid gate
    "qwen2_moe": (
        "qwen2_moe",
        "qwen",
        {
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "rope_theta": 1000000.0,
            "num_experts": 64,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 2560,
            "shared_expert_intermediate_size": 20480,
            "norm_topk_prob": False,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "use_sliding_window": False,
        },
    ),
    # Mixtral-8x7B / 8x22B: 8 experts of intermediate_size each, top-2
    "mixtral": (
        "mixtral",
        "mistral",
        {
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "rope_theta": 1000000.0,
            "sliding_window": None,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "router_aux_loss_coef": 0.02,
        },
    ),
}


def moe_summary(cfg: dict[str, Any]) -> str | None:
    """One line about a built folder's experts (``config.json`` as a dict), for ``tunekit tiny-model``; None when the
    model is dense."""
    experts = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts")
    if not experts:
        return None
    width = cfg.get("moe_intermediate_size") or cfg.get("intermediate_size")
    shared = cfg.get("shared_expert_intermediate_size")
    return (
        f"  experts       {experts} per layer, top-{cfg.get('num_experts_per_tok')} router, expert width {width}"
        + (f", shared expert width {shared}" if shared else "")
    )
