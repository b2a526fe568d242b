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


def _deepseek(mscale: float) -> dict[str, Any]:
    """DeepSeek-V2/V3's shared config.json fields: multi-head latent attention and YaRN (``mscale`` differs)."""
    yarn = dict(type="yarn", factor=40, original_max_position_embeddings=4096, beta_fast=32, beta_slow=1)
    return {
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "attention_bias": False,
        "rope_theta": 10000.0,
        "rope_scaling": {**yarn, "mscale": mscale, "mscale_all_dim": mscale},
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
    }


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
    # DeepSeek-V3 / R1 (671B, 37B active): multi-head latent attention (q/kv compressed through q_a/q_b and
    # kv_a/kv_b projections), first 3 layers dense, then 256 sigmoid-scored experts + 1 shared expert per layer,
    # routed top-8 within the best 4 of 8 expert groups (group-limited routing, aux-loss-free bias)
    "deepseek_v3": (
        "deepseek_v3",
        "deepseek3",
        {
            **_deepseek(mscale=1.0),
            "n_routed_experts": 256,
            "n_shared_experts": 1,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 2048,
            "first_k_dense_replace": 3,
            "n_group": 8,
            "topk_group": 4,
            "norm_topk_prob": True,
            "routed_scaling_factor": 2.5,
        },
    ),
    # DeepSeek-V2 (236B, 21B active): the same latent attention, first layer dense, 160 softmax-scored experts + 2
    # shared experts, top-6 within the best 3 of 8 groups (topk_method group_limited_greedy)
    "deepseek_v2": (
        "deepseek_v2",
        "deepseek",
        {
            **_deepseek(mscale=0.707),
            "n_routed_experts": 160,
            "n_shared_experts": 2,
            "num_experts_per_tok": 6,
            "moe_intermediate_size": 1536,
            "first_k_dense_replace": 1,
            "n_group": 8,
            "topk_group": 3,
            "topk_method": "group_limited_greedy",
            "norm_topk_prob": False,
            "routed_scaling_factor": 16.0,
        },
    ),
    # gpt-oss-20b (21B, 3.6B active) / 120b: attention with biases and a learned sink logit per head, sliding-window
    # (128) and full attention alternating, 32 experts top-4 of width intermediate_size; the experts are fused and
    # transposed (gate_up_proj: experts x hidden x 2 width, interleaved gate/up) with biases; the router
    # (mlp.router) has a bias too
    "gpt_oss": (
        "gpt_oss",
        "gpt_oss",
        {
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "attention_bias": True,
            "rope_theta": 150000.0,
            "rope_scaling": {
                "rope_type": "yarn",
                "factor": 32.0,
                "original_max_position_embeddings": 4096,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "truncate": False,
            },
            "sliding_window": 128,
            "layer_types": ["sliding_attention", "full_attention"],
            "num_local_experts": 32,
            "num_experts_per_tok": 4,
            "router_aux_loss_coef": 0.9,
            "swiglu_limit": 7.0,
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
    extra = [f"shared expert width {shared}"] if shared else []
    if cfg.get("n_shared_experts"):  # DeepSeek: n shared experts of the routed experts' width, as one MLP
        extra.append(f"{cfg['n_shared_experts']} shared expert(s) of width {width}")
    if int(cfg.get("n_group") or 1) > 1:
        extra.append(f"routed within the best {cfg.get('topk_group')} of {cfg['n_group']} expert groups")
    if cfg.get("first_k_dense_replace"):
        extra.append(f"first {cfg['first_k_dense_replace']} layer(s) dense")
    return (
        f"  experts       {experts} per layer, top-{cfg.get('num_experts_per_tok')} router, expert width {width}"
        + ("".join(f", {e}" for e in extra))
    )
