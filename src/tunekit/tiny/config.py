"""Tiny configs: a real family's config dict with every size replaced by a small one (for tunekit.tiny)."""

from __future__ import annotations

import copy
from typing import Any

from tunekit.errors import ModelError

DEFAULT_MAX_POSITIONS = 2048


# Keys whose value is a size/count we shrink, or bookkeeping of the original checkpoint we drop.
_DROP_KEYS = (
    "quantization_config",
    "_name_or_path",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "auto_map",
    "architectures",
    "_commit_hash",
    "id2label",
    "label2id",
    "task_specific_params",
)


def shrink_config(
    base: dict[str, Any],
    *,
    hidden_size: int,
    num_layers: int,
    intermediate_size: int | None,
    num_heads: int,
    num_kv_heads: int | None,
    vocab_size: int,
    max_position_embeddings: int = DEFAULT_MAX_POSITIONS,
) -> dict[str, Any]:
    """Copy a config dict, keeping its structural flags and replacing every size by a tiny one."""
    if hidden_size % num_heads:
        raise ModelError(f"tiny-model: hidden_size {hidden_size} must be divisible by num_heads {num_heads}.")
    kv = num_heads if num_kv_heads is None or base.get("kv_lora_rank") else num_kv_heads  # latent attention: all heads
    if kv < 1 or num_heads % kv:
        raise ModelError(f"tiny-model: num_heads {num_heads} must be a multiple of num_kv_heads {kv}.")
    cfg = {k: copy.deepcopy(v) for k, v in base.items() if k not in _DROP_KEYS}
    head_dim = hidden_size // num_heads
    inter = intermediate_size or 4 * hidden_size
    cfg.update(
        hidden_size=hidden_size,
        intermediate_size=inter,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        vocab_size=vocab_size,
        max_position_embeddings=min(
            int(cfg.get("max_position_embeddings") or max_position_embeddings), max_position_embeddings
        ),
        initializer_range=0.02,
        use_cache=True,
    )
    for key in ("rope_scaling", "rope_parameters"):  # long-context scaling: keep its ratio to the new length
        rope = cfg.get(key)
        if isinstance(rope, dict) and rope.get("original_max_position_embeddings"):
            factor = float(rope.get("factor") or 1.0)
            rope["original_max_position_embeddings"] = max(int(cfg["max_position_embeddings"] / max(factor, 1.0)), 1)
            if factor.is_integer():  # YaRN checks length = original x factor
                cfg["max_position_embeddings"] = rope["original_max_position_embeddings"] * int(factor)
    if "query_pre_attn_scalar" in cfg:  # gemma2/3 scale attention by this (= head_dim in the real ones)
        cfg["query_pre_attn_scalar"] = head_dim
    if cfg.get("sliding_window"):
        cfg["sliding_window"] = min(int(cfg["sliding_window"]), 128)
    if isinstance(cfg.get("layer_types"), list) and cfg["layer_types"]:
        orig = list(cfg["layer_types"])
        types = [orig[i % len(orig)] for i in range(num_layers)]
        if len(set(orig)) > 1 and len(set(types)) == 1 and "full_attention" in orig:
            types[-1] = "full_attention"  # keep both attention kinds present
        cfg["layer_types"] = types
    for key in ("max_window_layers",):
        if key in cfg:
            cfg[key] = min(int(cfg[key]), num_layers)
    _shrink_latent_attention(cfg, hidden_size, head_dim)
    # mixture of experts: few small experts (8 in 4 groups where the router picks groups first, DeepSeek)
    grouped = int(cfg.get("n_group") or 1) > 1
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        if cfg.get(key):
            cfg[key] = min(int(cfg[key]), 8 if grouped else 4)
    if grouped:
        cfg["n_group"], cfg["topk_group"] = 4, min(int(cfg.get("topk_group") or 1), 2)
    if cfg.get("first_k_dense_replace"):  # DeepSeek's leading dense layers: keep one sparse layer at least
        cfg["first_k_dense_replace"] = max(min(int(cfg["first_k_dense_replace"]), num_layers - 1), 0)
    if cfg.get("num_experts_per_tok"):
        cfg["num_experts_per_tok"] = min(int(cfg["num_experts_per_tok"]), 2)
    for key in ("moe_intermediate_size", "shared_expert_intermediate_size"):
        if cfg.get(key):
            cfg[key] = inter if key.startswith("shared") else max(inter // 2, 8)
    if isinstance(cfg.get("mlp_only_layers"), list):
        cfg["mlp_only_layers"] = [i for i in cfg["mlp_only_layers"] if i < num_layers]
    return cfg


def _shrink_latent_attention(cfg: dict[str, Any], hidden_size: int, head_dim: int) -> None:
    """DeepSeek's multi-head latent attention: the query and key/value compressions and the head widths, tiny, in the
    published ratios (rotary part half the rest of a query/key head)."""
    if not cfg.get("kv_lora_rank"):
        return
    cfg["kv_lora_rank"] = max(hidden_size // 4, 8)
    if cfg.get("q_lora_rank"):
        cfg["q_lora_rank"] = max(hidden_size // 2, 8)
    rope = max(head_dim // 2, 2)
    cfg.update(qk_nope_head_dim=head_dim, qk_rope_head_dim=rope, v_head_dim=head_dim, head_dim=rope)  # rotary width


def make_config(values: dict[str, Any]):
    """The transformers config of a (shrunk) config dict; its ``rope_theta`` goes into ``rope_parameters``."""
    from transformers import AutoConfig

    values = dict(values)
    model_type = values.pop("model_type")
    rope_theta = values.pop("rope_theta", None)
    try:
        config = AutoConfig.for_model(model_type, **values)
    except ValueError as exc:
        raise ModelError(f"tiny-model: transformers does not know model_type '{model_type}': {exc}") from exc
    if rope_theta is not None:  # transformers 5 keeps rope settings in rope_parameters
        params = dict(getattr(config, "rope_parameters", None) or {"rope_type": "default"})
        if "full_attention" in params or "sliding_attention" in params:
            for sub in params.values():
                if isinstance(sub, dict):
                    sub["rope_theta"] = rope_theta
        else:
            params["rope_theta"] = rope_theta
        config.rope_parameters = params
    return config
