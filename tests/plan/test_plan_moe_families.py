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


def _meta_model(config: dict):
    from transformers import AutoConfig, AutoModelForCausalLM

    hf = AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items() if k != "model_type"})
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(hf)


@pytest.mark.parametrize("key", ["deepseek-v3", "deepseek-v2", "deepseek-v2-lite"])
def test_deepseek_layers_are_planned_with_their_own_structure(key):
    """Latent attention's projections and the leading dense layers as transformers builds them: the Linear weights of
    every decoder layer (what QLoRA quantizes) and the parameters of each layer add up to the meta-built model's."""
    from tunekit.plan.latent_attention import Latent
    from tunekit.plan.params import layer_linears

    cfg = BUILTIN[key]
    shape = load_shape(key, None)
    model = _meta_model(cfg)
    layers = model.model.layers
    assert shape.dense_layers == tuple(range(cfg["first_k_dense_replace"]))
    q_rank = cfg.get("q_lora_rank") or 0
    assert shape.latent == Latent(q_rank, 512, 128, 64, 128)
    linear_weights = sum(
        m.weight.numel() for layer in layers for m in layer.modules() if isinstance(m, torch.nn.Linear)
    )
    assert layer_linears(shape)[0] == linear_weights
    per_layer = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    assert shape.dense_view().layer_params == per_layer[0] and shape.layer_params == per_layer[-1]
    outside = sum(k for _, k in shape.other_param_names)
    assert sum(view.layer_params * n for view, n in shape.variants()) + outside == shape.total_params
    # the attention, from the config: q (compressed or not), the key/value compression and its expansion, o_proj
    h, H = cfg["hidden_size"], cfg["num_attention_heads"]
    q = h * q_rank + q_rank + q_rank * H * 192 if q_rank else h * H * 192
    attention = q + h * (512 + 64) + 512 + 512 * H * (128 + 128) + H * 128 * h
    assert sum(p.numel() for p in layers[-1].self_attn.parameters()) == attention
    assert sum(k for n, k in shape.layer_param_names if n.startswith("self_attn.")) == attention


def test_deepseek_v2_lite_counts_as_published():
    """deepseek-ai/DeepSeek-V2-Lite: 15.7B parameters, 2.4B activated (2.45B without the input embedding table, as
    OpenAI counts too; the published figure is truncated)."""
    cfg = BUILTIN["deepseek-v2-lite"]
    shape = load_shape("deepseek-ai/DeepSeek-V2-Lite-Chat", None)
    assert shape.total_params == _meta_count(cfg)
    assert shape.moe.active == shape.total_params - _idle(cfg, 26)
    embedding = cfg["vocab_size"] * cfg["hidden_size"]
    assert round(shape.total_params / 1e9, 1) == 15.7
    assert 2.4 <= (shape.moe.active - embedding) / 1e9 < 2.5


@pytest.mark.parametrize("layers", [1, -1], ids=["last-sparse", "first-dense"])
def test_freeze_counts_the_dense_and_the_sparse_layer_of_the_tiny_deepseek(layers, tmp_path):
    """freeze_trainable_layers on tiny DeepSeek-V3 (layer 0 dense, layer 1 sparse): the trainable parameters are the
    chosen layer's own, as tunekit's model trains them, and full fine-tuning's largest tensor is an expert weight."""
    folder = build_tiny_model(tmp_path / "model", like="deepseek-v3", seed=0)
    options = {"model_name_or_path": str(folder), "template": "qwen", "finetuning_type": "freeze"}
    cfg = load_config(None, {**options, "freeze_trainable_layers": layers})
    plan = make_plan(cfg, num_samples=100)
    model = load_model(cfg, load_tokenizer(cfg), is_trainable=True)
    assert plan.params["trainable"] == sum(p.numel() for p in model.parameters() if p.requires_grad)
    from tunekit.plan.params import count_params
    from tunekit.plan.training_setup import resolve_setup

    shape = load_shape(None, str(folder))
    full = load_config(None, {**options, "finetuning_type": "full"})
    largest = count_params(shape, resolve_setup(full)).largest_trainable_tensor
    assert largest == max(p.numel() for p in model.parameters())


@pytest.mark.parametrize("target", ["all", "gate_proj,kv_b_proj"])
def test_oft_on_the_tiny_deepseek_counts_each_layer_s_own_linears(target, tmp_path):
    """OFT on tiny DeepSeek-V3 (layer 0 dense: mlp.gate_proj; layer 1 sparse: mlp.shared_experts.gate_proj): the plan
    runs, its trainable parameters are those tunekit's model trains, and the adapted paths are those of both layers."""
    from tunekit.model.moe import in_layer
    from tunekit.plan.params import count_params
    from tunekit.plan.training_setup import resolve_setup

    folder = build_tiny_model(tmp_path / "model", like="deepseek-v3", seed=0)
    options = {"model_name_or_path": str(folder), "template": "qwen", "finetuning_type": "oft"}
    cfg = load_config(None, {**options, "oft_block_size": 8, "oft_target": target})
    plan = make_plan(cfg, num_samples=100)
    model = load_model(cfg, load_tokenizer(cfg), is_trainable=True)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert plan.params["trainable"] == plan.params["lora"] == trainable > 0
    assert plan.time["total_flops"] > 0
    built = {in_layer(n) for n, m in model.named_modules() if hasattr(m, "oft_R")}
    assert {"mlp.gate_proj", "mlp.shared_experts.gate_proj"} <= built
    counts = count_params(load_shape(None, str(folder)), resolve_setup(cfg))
    assert sorted(counts.adapted_per_layer) == sorted(built)
