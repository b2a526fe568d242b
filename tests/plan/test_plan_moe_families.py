"""`tunekit plan` on DeepSeek-V2/V3 and gpt-oss (plan/builtin_shapes.py, plan/moe.py): total parameters exactly those
of transformers' model on the meta device, active parameters per token as their makers state them, and LoRA counted
as tunekit builds it (DeepSeek's dense-layer MLP and shared experts left out, model/moe.py)."""

from __future__ import annotations

import pytest
import torch

from tunekit.config import load_config
from tunekit.model.loader import load_model, load_tokenizer
from tunekit.plan import make_plan
from tunekit.plan.architectures import load_shape
from tunekit.plan.builtin_shapes import BUILTIN
from tunekit.tiny.text import build_tiny_model


def _meta_count(config: dict) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    hf = AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items() if k != "model_type"})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf)
    return sum(p.numel() for p in model.parameters())


def _idle(cfg: dict, sparse_layers: int) -> int:
    """Per sparse layer, the (E - k) routed experts a token skips, each gate + up + down (3 x hidden x width), and for
    gpt-oss their biases (2 width + hidden)."""
    e = cfg.get("n_routed_experts") or cfg["num_local_experts"]
    width = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
    per_expert = 3 * cfg["hidden_size"] * width + (
        2 * width + cfg["hidden_size"] if cfg["model_type"] == "gpt_oss" else 0
    )
    return sparse_layers * (e - cfg["num_experts_per_tok"]) * per_expert


@pytest.mark.parametrize(
    ("name", "key", "sparse", "total_b", "active_b"),
    [
        ("deepseek-ai/DeepSeek-V3", "deepseek-v3", 58, 671.03, 37.55),  # published: 671B, 37B activated
        ("deepseek-ai/DeepSeek-R1", "deepseek-v3", 58, 671.03, 37.55),
        ("deepseek-ai/DeepSeek-V2", "deepseek-v2", 59, 235.74, 21.38),  # published: 236B, 21B
        ("openai/gpt-oss-20b", "gpt-oss-20b", 24, 20.91, 4.19),  # published: 21B, 3.6B (embeddings not counted)
        ("gpt-oss-120b", "gpt-oss-120b", 36, 116.83, 5.71),  # published: 117B, 5.1B
    ],
)
def test_total_is_transformers_count_and_active_skips_the_idle_experts(name, key, sparse, total_b, active_b):
    cfg = BUILTIN[key]
    shape = load_shape(name, None)
    total = _meta_count(cfg)
    assert shape.total_params == shape.moe.total == total
    assert shape.moe.sparse_layers == sparse  # DeepSeek: the first 3 (V3) / 1 (V2) layers dense
    assert shape.moe.active == total - _idle(cfg, sparse)
    assert (round(total / 1e9, 2), round(shape.moe.active / 1e9, 2)) == (total_b, active_b)
    if key.startswith("gpt-oss"):  # OpenAI counts active parameters without the input embedding table (a lookup)
        embedding = cfg["vocab_size"] * cfg["hidden_size"]
        assert round((shape.moe.active - embedding) / 1e9, 1) == {"gpt-oss-20b": 3.6, "gpt-oss-120b": 5.1}[key]


@pytest.mark.parametrize("like", ["deepseek-v3", "gpt-oss-20b"])
def test_the_tiny_model_plan_counts_the_lora_tunekit_trains(like, tmp_path):
    folder = build_tiny_model(tmp_path / "model", like=like, seed=0)
    options = {"model_name_or_path": str(folder), "template": "qwen", "finetuning_type": "lora"}
    plan = make_plan(load_config(None, options), num_samples=100)
    cfg = load_config(None, options)
    model = load_model(cfg, load_tokenizer(cfg), is_trainable=True)
    assert plan.params["lora"] == sum(p.numel() for p in model.parameters() if p.requires_grad)
    # flash_attn auto: the attention the plan counts is the one the model runs (gpt-oss has no sdpa path: eager)
    assert (
        plan.setup["attention"] == model.config._attn_implementation == ("eager" if like == "gpt-oss-20b" else "sdpa")
    )
