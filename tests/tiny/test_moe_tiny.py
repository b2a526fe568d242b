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


@pytest.mark.parametrize(
    ("like", "arch", "shared_width"),
    [("deepseek-v3", "DeepseekV3ForCausalLM", 128), ("deepseek-v2-chat", "DeepseekV2ForCausalLM", 256)],
)
def test_deepseek_builds_latent_attention_a_dense_first_layer_shared_experts_and_group_limited_routing(
    tmp_path, like, arch, shared_width
):
    """DeepSeek-V2/V3 as published (tiny/moe.py): query and key/value compressed (q_a/q_b, kv_a/kv_b), the first
    layer(s) dense, then 8 routed experts in 4 groups + shared experts; a token's 2 experts come from its best 2
    groups."""
    from transformers import AutoModelForCausalLM

    out = build_tiny_model(tmp_path / "m", like=like, seed=0)
    model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True, dtype=torch.float32)
    assert type(model).__name__ == arch and not info["missing_keys"] and not info["unexpected_keys"]
    cfg = model.config
    assert (cfg.n_routed_experts, cfg.num_experts_per_tok, cfg.n_group, cfg.topk_group) == (8, 2, 4, 2)
    assert (cfg.first_k_dense_replace, cfg.num_key_value_heads, cfg.kv_lora_rank, cfg.q_lora_rank) == (1, 4, 16, 32)
    dense, sparse = model.model.layers
    assert not hasattr(dense.mlp, "experts") and dense.mlp.gate_proj.out_features == 4 * HIDDEN
    attn = sparse.self_attn
    assert (attn.q_a_proj.out_features, attn.kv_a_proj_with_mqa.out_features) == (32, 16 + 8)  # + rotary key part
    assert attn.q_b_proj.out_features == 4 * (16 + 8)  # heads x (no-rope + rope head width)
    assert sparse.mlp.experts.gate_up_proj.shape == (8, 2 * 2 * HIDDEN, HIDDEN)
    assert sparse.mlp.experts.down_proj.shape == (8, HIDDEN, 2 * HIDDEN)
    assert sparse.mlp.gate.weight.shape == (8, HIDDEN)
    assert sparse.mlp.shared_experts.down_proj.in_features == shared_width  # n_shared_experts x expert width
    torch.manual_seed(0)
    hidden = torch.randn(64, HIDDEN)
    with torch.no_grad():
        _, weights, chosen = sparse.mlp.gate(hidden)
    groups = chosen // 2  # experts 2g, 2g+1 form group g
    assert chosen.shape == (64, 2) and len(set(chosen.flatten().tolist())) > 4  # tokens reach most experts
    assert len(set(groups.flatten().tolist())) == 4
    for row in range(64):  # each token's experts lie in its 2 best groups (DeepSeek-V3: by the sum of the top 2)
        scores = hidden[row] @ sparse.mlp.gate.weight.T
        scores = scores.sigmoid() if arch == "DeepseekV3ForCausalLM" else scores.softmax(-1)
        per_group = scores.view(4, 2)
        best = per_group.sum(-1) if arch == "DeepseekV3ForCausalLM" else per_group.max(-1).values
        assert set(groups[row].tolist()) <= set(best.topk(2).indices.tolist()), row


def test_gpt_oss_builds_sinks_alternating_sliding_attention_and_transposed_fused_experts_with_biases(tmp_path):
    from transformers import AutoModelForCausalLM

    out = build_tiny_model(tmp_path / "m", like="gpt-oss-20b", seed=0)
    model, info = AutoModelForCausalLM.from_pretrained(
        out, output_loading_info=True, dtype=torch.float32, attn_implementation="eager"
    )
    assert type(model).__name__ == "GptOssForCausalLM" and not info["missing_keys"] and not info["unexpected_keys"]
    cfg = model.config
    assert cfg.layer_types == ["sliding_attention", "full_attention"] and cfg.sliding_window == 128
    assert (cfg.num_local_experts, cfg.num_experts_per_tok, cfg.router_aux_loss_coef) == (4, 2, 0.9)
    width = cfg.intermediate_size
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        assert attn.sinks.shape == (4,) and attn.q_proj.bias is not None  # one sink logit per head
        assert mlp.experts.gate_up_proj.shape == (4, HIDDEN, 2 * width)  # experts x in x out (transposed)
        assert mlp.experts.gate_up_proj_bias.shape == (4, 2 * width)
        assert mlp.experts.down_proj.shape == (4, width, HIDDEN) and mlp.experts.down_proj_bias.shape == (4, HIDDEN)
        assert mlp.router.weight.shape == (4, HIDDEN) and mlp.router.bias.shape == (4,)
    lines = describe(out).splitlines()
    assert "  experts       4 per layer, top-2 router, expert width 256" in lines


def test_describe_names_deepseek_shared_experts_groups_and_dense_layers(tmp_path):
    out = build_tiny_model(tmp_path / "m", like="deepseek-v3", seed=0)
    assert (
        "  experts       8 per layer, top-2 router, expert width 128, 1 shared expert(s) of width 128, routed within "
        "the best 2 of 4 expert groups, first 1 layer(s) dense"
    ) in describe(out).splitlines()


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("deepseek-ai/DeepSeek-V3", "deepseek_v3"),
        ("deepseek-v3-0324", "deepseek_v3"),
        ("deepseek-v3.1-base", "deepseek_v3"),
        ("DeepSeek-R1-0528", "deepseek_v3"),
        ("deepseek-v2-chat", "deepseek_v2"),
        ("openai/gpt-oss-20b", "gpt_oss"),
        ("gpt-oss-120b", "gpt_oss"),
        ("deepseek-r1-distill-llama-8b", "llama"),
    ],
)
def test_deepseek_and_gpt_oss_names(name, family):
    from tunekit.tiny.names import family_of_name
    from tunekit.tiny.text import FAMILIES

    assert family_of_name(name, FAMILIES) == family


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("deepseek-v3.2", "an unknown family"),  # sparse attention: model_type deepseek_v32
        ("deepseek-v2-lite", "'lite' is not a deepseek_v2 variant tunekit knows"),  # no query compression, 64 experts
    ],
)
def test_deepseek_architectures_tunekit_does_not_build_are_refused(name, why):
    from tunekit.errors import ModelError
    from tunekit.tiny.names import family_of_name
    from tunekit.tiny.text import FAMILIES

    with pytest.raises(ModelError) as err:
        family_of_name(name, FAMILIES)
    assert str(err.value).startswith(f"tiny-model: tunekit cannot build '{name}' ({why}); it builds text: deepseek_v2")
