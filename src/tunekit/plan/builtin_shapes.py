"""The config.json fields of common models, so ``--model-config qwen2.5-7b`` plans without a download.

``BUILTIN`` maps a name to the fields; :func:`find_builtin` also accepts hub ids and the usual spellings
(``Qwen/Qwen2.5-7B-Instruct``, ``meta-llama/Meta-Llama-3-8B``: :func:`builtin_key`).
"""

from __future__ import annotations

from typing import Any

_QWEN25 = dict(
    model_type="qwen2", hidden_act="silu", rms_norm_eps=1e-6, rope_theta=1_000_000.0, max_position_embeddings=32768
)
_QWEN3 = dict(
    model_type="qwen3",
    hidden_act="silu",
    rms_norm_eps=1e-6,
    rope_theta=1_000_000.0,
    head_dim=128,
    vocab_size=151936,
    max_position_embeddings=40960,
    attention_bias=False,
)
_DEEPSEEK = dict(  # DeepSeek-V2/V3's config.json: latent attention, routed + shared experts, leading dense layers
    hidden_act="silu",
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    max_position_embeddings=163840,
    attention_bias=False,
    tie_word_embeddings=False,
    num_hidden_layers=61,
    kv_lora_rank=512,
    q_lora_rank=1536,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
)
_GPT_OSS = dict(  # openai/gpt-oss-*'s config.json: sinks, sliding window 128 on every other layer, 4 of E experts
    model_type="gpt_oss",
    hidden_size=2880,
    intermediate_size=2880,
    head_dim=64,
    num_attention_heads=64,
    num_key_value_heads=8,
    vocab_size=201088,
    sliding_window=128,
    num_experts_per_tok=4,
    rope_theta=150000.0,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    attention_bias=True,
    tie_word_embeddings=False,
    router_aux_loss_coef=0.9,
    swiglu_limit=7.0,
)
# mixture-of-experts models beside qwen3-30b-a3b (plan/moe.py counts total and active parameters)
_DEEPSEEK_GPT_OSS = {
    "deepseek-v3": {  # deepseek-ai/DeepSeek-V3 (and R1, V3.1): 671B, 37B active; the MTP layer not counted
        **_DEEPSEEK,
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "vocab_size": 129280,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "n_group": 8,
        "topk_group": 4,
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
    },
    "deepseek-v2": {  # deepseek-ai/DeepSeek-V2: 236B, 21B active
        **_DEEPSEEK,
        "model_type": "deepseek_v2",
        "num_hidden_layers": 60,
        "hidden_size": 5120,
        "intermediate_size": 12288,
        "moe_intermediate_size": 1536,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "vocab_size": 102400,
        "n_routed_experts": 160,
        "n_shared_experts": 2,
        "num_experts_per_tok": 6,
        "first_k_dense_replace": 1,
        "n_group": 8,
        "topk_group": 3,
        "topk_method": "group_limited_greedy",
        "norm_topk_prob": False,
        "routed_scaling_factor": 16.0,
    },
    "deepseek-v2-lite": {  # deepseek-ai/DeepSeek-V2-Lite: 15.7B, 2.4B active; one q_proj (no query compression)
        **_DEEPSEEK,
        "model_type": "deepseek_v2",
        "num_hidden_layers": 27,
        "hidden_size": 2048,
        "intermediate_size": 10944,
        "moe_intermediate_size": 1408,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "q_lora_rank": None,
        "vocab_size": 102400,
        "n_routed_experts": 64,
        "n_shared_experts": 2,
        "num_experts_per_tok": 6,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "greedy",
        "norm_topk_prob": False,
        "routed_scaling_factor": 1.0,
    },
    "gpt-oss-20b": {**_GPT_OSS, "num_hidden_layers": 24, "num_local_experts": 32},  # 21B, 3.6B active
    "gpt-oss-120b": {**_GPT_OSS, "num_hidden_layers": 36, "num_local_experts": 128},  # 117B, 5.1B active
}
_LLAMA3 = dict(
    model_type="llama",
    hidden_act="silu",
    rms_norm_eps=1e-5,
    rope_theta=500_000.0,
    vocab_size=128256,
    max_position_embeddings=131072,
)


def _q25(h, i, layers, a, kv, v, tie):
    """Qwen2.5: hidden, intermediate, layers, attention heads, key/value heads, vocabulary, tied embeddings."""
    return {
        **_QWEN25,
        "hidden_size": h,
        "intermediate_size": i,
        "num_hidden_layers": layers,
        "num_attention_heads": a,
        "num_key_value_heads": kv,
        "vocab_size": v,
        "tie_word_embeddings": tie,
    }


def _q3(h, i, layers, a, kv, tie):
    return {
        **_QWEN3,
        "hidden_size": h,
        "intermediate_size": i,
        "num_hidden_layers": layers,
        "num_attention_heads": a,
        "num_key_value_heads": kv,
        "tie_word_embeddings": tie,
    }


def _l3(h, i, layers, a, kv, tie):
    return {
        **_LLAMA3,
        "hidden_size": h,
        "intermediate_size": i,
        "num_hidden_layers": layers,
        "num_attention_heads": a,
        "num_key_value_heads": kv,
        "tie_word_embeddings": tie,
    }


# config.json fields of the published models (the fields that decide shapes).
BUILTIN: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": _q25(896, 4864, 24, 14, 2, 151936, True),
    "qwen2.5-1.5b": _q25(1536, 8960, 28, 12, 2, 151936, True),
    "qwen2.5-3b": _q25(2048, 11008, 36, 16, 2, 151936, True),
    "qwen2.5-7b": _q25(3584, 18944, 28, 28, 4, 152064, False),
    "qwen2.5-14b": _q25(5120, 13824, 48, 40, 8, 152064, False),
    "qwen2.5-32b": _q25(5120, 27648, 64, 40, 8, 152064, False),
    "qwen2.5-72b": _q25(8192, 29568, 80, 64, 8, 152064, False),
    "qwen3-0.6b": _q3(1024, 3072, 28, 16, 8, True),
    "qwen3-1.7b": _q3(2048, 6144, 28, 16, 8, True),
    "qwen3-4b": _q3(2560, 9728, 36, 32, 8, True),
    "qwen3-8b": _q3(4096, 12288, 36, 32, 8, False),
    "qwen3-14b": _q3(5120, 17408, 40, 40, 8, False),
    "qwen3-32b": _q3(5120, 25600, 64, 64, 8, False),
    "qwen3-30b-a3b": {  # Qwen/Qwen3-30B-A3B: every layer 128 experts of width 768, 8 per token (plan/moe.py)
        **_q3(2048, 6144, 48, 32, 4, False),
        "model_type": "qwen3_moe",
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    },
    **_DEEPSEEK_GPT_OSS,
    "llama-3.2-1b": {**_l3(2048, 8192, 16, 32, 8, True), "head_dim": 64},
    "llama-3.2-3b": {**_l3(3072, 8192, 28, 24, 8, True), "head_dim": 128},
    "llama-3.1-8b": _l3(4096, 14336, 32, 32, 8, False),
    "llama-3.1-70b": _l3(8192, 28672, 80, 64, 8, False),
    "mistral-7b": {
        "model_type": "mistral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 32768,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "max_position_embeddings": 32768,
        "sliding_window": None,
    },
    # THUDM/GLM-4-9B-0414 (Glm4ForCausalLM): glm-4-9b's shape with two more norms per layer (sandwich norms)
    "glm-4-9b-0414": {
        "model_type": "glm4",
        "hidden_size": 4096,
        "intermediate_size": 13696,
        "num_hidden_layers": 40,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "vocab_size": 151552,
        "attention_bias": True,
        "partial_rotary_factor": 0.5,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "max_position_embeddings": 32768,
    },
    # THUDM/glm-4-9b-chat-hf (GlmForCausalLM), the native port of glm-4-9b-chat
    "glm-4-9b": {
        "model_type": "glm",
        "hidden_size": 4096,
        "intermediate_size": 13696,
        "num_hidden_layers": 40,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "vocab_size": 151552,
        "attention_bias": True,
        "partial_rotary_factor": 0.5,
        "rms_norm_eps": 1.5625e-7,
        "tie_word_embeddings": False,
        "max_position_embeddings": 131072,
    },
    "gemma-2-2b": {
        "model_type": "gemma2",
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "vocab_size": 256000,
        "tie_word_embeddings": True,
        "max_position_embeddings": 8192,
    },
    "gemma-2-9b": {
        "model_type": "gemma2",
        "hidden_size": 3584,
        "intermediate_size": 14336,
        "num_hidden_layers": 42,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "vocab_size": 256000,
        "tie_word_embeddings": True,
        "max_position_embeddings": 8192,
    },
    "gemma-3-1b": {
        "model_type": "gemma3_text",
        "hidden_size": 1152,
        "intermediate_size": 6912,
        "num_hidden_layers": 26,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "vocab_size": 262144,
        "tie_word_embeddings": True,
        "max_position_embeddings": 32768,
    },
}

# vision-language models: the official config.json fields (Qwen/Qwen2-VL-2B-Instruct, Qwen/Qwen2.5-VL-7B-Instruct,
# Qwen/Qwen3-VL-4B-Instruct, Qwen/Qwen3-VL-8B-Instruct); token ids as published
_QWEN_VL_IDS = dict(
    vision_start_token_id=151652, vision_end_token_id=151653, image_token_id=151655, video_token_id=151656
)
_Q3VL_TEXT = dict(
    model_type="qwen3_vl_text",
    head_dim=128,
    hidden_act="silu",
    rms_norm_eps=1e-6,
    rope_theta=5_000_000,
    vocab_size=151936,
    max_position_embeddings=262144,
    attention_bias=False,
    rope_scaling={"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
)
_Q3VL_VISION = dict(
    hidden_act="gelu_pytorch_tanh",
    num_heads=16,
    in_channels=3,
    patch_size=16,
    spatial_merge_size=2,
    temporal_patch_size=2,
    num_position_embeddings=2304,
)
BUILTIN.update(
    {
        "qwen2-vl-2b": {
            **_QWEN25,
            **_QWEN_VL_IDS,
            "model_type": "qwen2_vl",
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "num_hidden_layers": 28,
            "num_attention_heads": 12,
            "num_key_value_heads": 2,
            "vocab_size": 151936,
            "tie_word_embeddings": True,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
            "vision_config": {
                "depth": 32,
                "embed_dim": 1280,
                "mlp_ratio": 4,
                "num_heads": 16,
                "in_chans": 3,
                "hidden_size": 1536,
                "patch_size": 14,
                "spatial_merge_size": 2,
                "spatial_patch_size": 14,
                "temporal_patch_size": 2,
            },
        },
        "qwen2.5-vl-7b": {
            **_QWEN25,
            **_QWEN_VL_IDS,
            "model_type": "qwen2_5_vl",
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "vocab_size": 152064,
            "tie_word_embeddings": False,
            "max_position_embeddings": 128000,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
            "vision_config": {
                "depth": 32,
                "hidden_act": "silu",
                "hidden_size": 1280,
                "intermediate_size": 3420,
                "num_heads": 16,
                "in_chans": 3,
                "out_hidden_size": 3584,
                "patch_size": 14,
                "spatial_merge_size": 2,
                "spatial_patch_size": 14,
                "window_size": 112,
                "fullatt_block_indexes": [7, 15, 23, 31],
                "tokens_per_second": 2,
                "temporal_patch_size": 2,
            },
        },
        "qwen3-vl-4b": {
            **_QWEN_VL_IDS,
            "model_type": "qwen3_vl",
            "tie_word_embeddings": True,
            "text_config": {
                **_Q3VL_TEXT,
                "hidden_size": 2560,
                "intermediate_size": 9728,
                "num_hidden_layers": 36,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "tie_word_embeddings": True,
            },
            "vision_config": {
                **_Q3VL_VISION,
                "depth": 24,
                "hidden_size": 1024,
                "intermediate_size": 4096,
                "out_hidden_size": 2560,
                "deepstack_visual_indexes": [5, 11, 17],
            },
        },
        "qwen3-vl-8b": {
            **_QWEN_VL_IDS,
            "model_type": "qwen3_vl",
            "tie_word_embeddings": False,
            "text_config": {
                **_Q3VL_TEXT,
                "hidden_size": 4096,
                "intermediate_size": 12288,
                "num_hidden_layers": 36,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "tie_word_embeddings": False,
            },
            "vision_config": {
                **_Q3VL_VISION,
                "depth": 27,
                "hidden_size": 1152,
                "intermediate_size": 4304,
                "out_hidden_size": 4096,
                "deepstack_visual_indexes": [8, 16, 24],
            },
        },
    }
)

ALIASES = {
    "qwen2-7b": "qwen2.5-7b",
    "llama-3-8b": "llama-3.1-8b",
    "llama-3-70b": "llama-3.1-70b",
    "llama-3.3-70b": "llama-3.1-70b",
    "glm4-9b": "glm-4-9b-0414",
    "mistral-7b-v0.3": "mistral-7b",
    "qwen2_5-vl-7b": "qwen2.5-vl-7b",
    "qwen2.5vl-7b": "qwen2.5-vl-7b",
    "qwen3-30b-a3b-instruct-2507": "qwen3-30b-a3b",
    "qwen3-30b-a3b-thinking-2507": "qwen3-30b-a3b",
    "deepseek-r1": "deepseek-v3",
    "deepseek-r1-0528": "deepseek-v3",
    "deepseek-v3-0324": "deepseek-v3",
    "deepseek-v3.1": "deepseek-v3",
}


def builtin_names() -> list[str]:
    return sorted(BUILTIN)


def builtin_key(name: str) -> str:
    key = name.strip().lower().split("/")[-1]
    for suffix in ("-instruct", "-chat-hf", "-chat", "-it", "-base", "-hf"):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
    key = key.replace("meta-llama-", "llama-").replace("qwen2.5", "qwen2.5")
    key = key.replace("mistral-7b-instruct-v0.3", "mistral-7b").replace("-v0.3", "").replace("-v0.1", "")
    return ALIASES.get(key, key)


def find_builtin(name: str) -> dict[str, Any] | None:
    key = builtin_key(name)
    return dict(BUILTIN[key]) if key in BUILTIN else None
