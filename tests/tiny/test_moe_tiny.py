"""``tunekit tiny-model --like`` a mixture-of-experts name builds transformers' native MoE class: several experts in
fused 3-D weights, a top-k router that sends tokens to different experts, Qwen2-MoE's shared expert."""

from __future__ import annotations

import json

import pytest
import torch

from tunekit.tiny.text import build_tiny_model, describe, resolve_like

HIDDEN = 64  # build_tiny_model's default hidden size; its experts are half the dense width 4 x 64


@pytest.mark.parametrize(
    ("like", "arch", "tokenizer", "shared"),
    [
        ("qwen3-30b-a3b", "Qwen3MoeForCausalLM", "qwen3", False),
        ("qwen2-57b-a14b", "Qwen2MoeForCausalLM", "qwen", True),
        ("mixtral-8x7b-instruct-v0.1", "MixtralForCausalLM", "mistral", False),
        ("mixtral", "MixtralForCausalLM", "mistral", False),
    ],
)
def test_an_moe_name_builds_experts_a_top_k_router_and_the_shared_expert(tmp_path, like, arch, tokenizer, shared):
    from transformers import AutoModelForCausalLM

    assert resolve_like(like).tokenizer.name == tokenizer
    out = build_tiny_model(tmp_path / "m", like=like, seed=0)
    model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True, dtype=torch.float32)
    assert type(model).__name__ == arch and not info["missing_keys"] and not info["unexpected_keys"]
    cfg = model.config
    assert (cfg.num_experts_per_tok, cfg.num_hidden_layers) == (2, 2)
    width = cfg.intermediate_size if arch == "MixtralForCausalLM" else cfg.moe_intermediate_size
    assert width == (4 * HIDDEN if arch == "MixtralForCausalLM" else 2 * HIDDEN)
    for layer in model.model.layers:
        block = layer.mlp
        assert block.experts.gate_up_proj.shape == (4, 2 * width, HIDDEN)  # 4 experts, fused gate and up
        assert block.experts.down_proj.shape == (4, HIDDEN, width)
        assert block.gate.weight.shape == (4, HIDDEN)  # the router: one logit per expert
        assert hasattr(block, "shared_expert") == shared == hasattr(block, "shared_expert_gate")
    if shared:
        assert block.shared_expert.down_proj.in_features == 4 * HIDDEN
    ids = torch.arange(3, 40).unsqueeze(0)
    with torch.no_grad():
        router_logits = model(ids, output_router_logits=True).router_logits
    assert len(router_logits) == 2 and router_logits[0].shape == (ids.shape[1], 4)
    chosen = torch.topk(router_logits[0], 2, dim=-1).indices
    assert len(set(chosen.flatten().tolist())) > 2  # tokens reach more experts than one token's top-2


def test_describe_names_the_experts(tmp_path):
    out = build_tiny_model(tmp_path / "m", like="qwen2-57b-a14b", seed=0)
    lines = describe(out).splitlines()
    assert "  experts       4 per layer, top-2 router, expert width 128, shared expert width 256" in lines
    assert json.loads((out / "config.json").read_text())["architectures"] == ["Qwen2MoeForCausalLM"]
    dense = build_tiny_model(tmp_path / "d", like="qwen3", seed=0)
    assert not any(line.lstrip().startswith("experts") for line in describe(dense).splitlines())
