"""LoRA on a mixture-of-experts model (model/moe.py): ``all`` adapts the linear layers and the experts' fused 3-D
weights (PEFT ``target_parameters``), never a router; a 2-step run saves an adapter that plain peft reloads."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import alpaca_records, base_config, write_dataset
from tunekit.config import load_config
from tunekit.errors import ConfigError
from tunekit.model.loader import load_model, load_tokenizer
from tunekit.model.moe import moe_start_lines
from tunekit.tiny.text import build_tiny_model

RANK, E, H, WIDTH, KV = 8, 4, 64, 128, 32  # lora_rank; the tiny models' experts, hidden, expert width, k/v width


@pytest.fixture(scope="module")
def qwen3_moe(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("q3moe") / "model", like="qwen3-30b-a3b", seed=0)


@pytest.fixture(scope="module")
def qwen2_moe(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("q2moe") / "model", like="qwen2-57b-a14b", seed=0)


def _lora(model_dir, template="qwen3", **options):
    cfg = load_config(
        None,
        {"model_name_or_path": str(model_dir), "template": template, "finetuning_type": "lora", "lora_rank": RANK}
        | options,
    )
    return load_model(cfg, load_tokenizer(cfg), is_trainable=True), cfg


def _expert_lora_params() -> int:
    """LoRA on the fused experts per layer: gate_up (E x 2W x H) and down (E x H x W), each A: in -> r E and
    B: r E -> out."""
    return RANK * E * (H + 2 * WIDTH) + RANK * E * (WIDTH + H)


def test_lora_all_adapts_attention_and_fused_experts_and_keeps_the_router_frozen(qwen3_moe):
    model, cfg = _lora(qwen3_moe)
    peft = model.peft_config["default"]
    assert set(peft.target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert sorted(peft.target_parameters) == ["mlp.experts.down_proj", "mlp.experts.gate_up_proj"]
    trainable = {n: p.numel() for n, p in model.named_parameters() if p.requires_grad}
    assert all("lora_" in n for n in trainable) and not any(".mlp.gate." in n for n in trainable)
    assert all(not p.requires_grad for n, p in model.named_parameters() if ".mlp.gate." in n)
    attention = RANK * ((H + H) + (H + KV) + (H + KV) + (H + H))
    assert sum(trainable.values()) == 2 * (attention + _expert_lora_params())
    assert moe_start_lines(model, cfg) == [
        "mixture of experts: 4 experts per layer, top-2 routing, 2 sparse layers",
        "LoRA on k_proj, o_proj, q_proj, v_proj and the experts' fused weights mlp.experts.down_proj, "
        "mlp.experts.gate_up_proj (PEFT target_parameters); the routers (mlp.gate) stay frozen",
    ]


def test_the_shared_expert_is_adapted_its_gate_is_not(qwen2_moe):
    model, cfg = _lora(qwen2_moe, template="qwen")
    peft = model.peft_config["default"]
    assert set(peft.target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert not any("shared_expert_gate" in n for n, p in model.named_parameters() if p.requires_grad)
    assert any(".shared_expert.down_proj.lora_A" in n for n, _ in model.named_parameters())
    assert moe_start_lines(model, cfg)[1].endswith("the routers (mlp.gate, mlp.shared_expert_gate) stay frozen")


@pytest.mark.parametrize(
    ("target", "modules", "parameters", "on"),
    [
        ("q_proj,gate_up_proj", {"q_proj"}, ["mlp.experts.gate_up_proj"], "q_proj and the experts' fused weights"),
        ("experts", set(), ["mlp.experts.down_proj", "mlp.experts.gate_up_proj"], "the experts' fused weights"),
        ("q_proj,v_proj", {"q_proj", "v_proj"}, None, "q_proj, v_proj and no expert weight"),
    ],
)
def test_a_lora_target_list_names_linear_layers_and_expert_weights(qwen3_moe, target, modules, parameters, on):
    model, cfg = _lora(qwen3_moe, lora_target=target)
    assert moe_start_lines(model, cfg)[1].startswith(f"LoRA on {on}")
    peft = model.peft_config["default"]
    assert set(peft.target_modules or ()) == modules
    assert (sorted(peft.target_parameters) if peft.target_parameters else None) == parameters


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"lora_target": "q_proj,gate"},
            "lora_target names gate, the router of the mixture-of-experts layers (mlp.gate): tunekit keeps the "
            "routers frozen (an adapter there changes which experts each token reaches); remove it from lora_target.",
        ),
        (
            {"lora_target": "experts_proj"},
            "lora_target names experts_proj, which are not linear layers or expert weights of this model; available: "
            "k_proj, o_proj, q_proj, v_proj; the experts' fused weights: down_proj, gate_up_proj (or experts for "
            "both, or lora_target: all).",
        ),
        (
            {"lora_dropout": 0.05},
            "lora_target all adapts the experts' fused weights (mlp.experts.down_proj, mlp.experts.gate_up_proj) "
            "through PEFT's target_parameters, which does not support lora_dropout 0.05: set lora_dropout: 0, or name "
            "the linear layers only in lora_target (e.g. q_proj,k_proj,v_proj,o_proj).",
        ),
        (
            {"lora_target": "down_proj", "use_dora": True},
            "lora_target down_proj adapts the experts' fused weights (mlp.experts.down_proj) through PEFT's "
            "target_parameters, which does not support use_dora: set use_dora: false, or name the linear layers only "
            "in lora_target (e.g. q_proj,k_proj,v_proj,o_proj).",
        ),
    ],
)
def test_what_lora_cannot_do_on_the_experts_is_refused_by_name(qwen3_moe, options, message):
    with pytest.raises(ConfigError) as err:
        _lora(qwen3_moe, **options)
    assert str(err.value) == message


def test_two_step_lora_run_saves_an_adapter_plain_peft_reloads(qwen3_moe, tmp_path, capsys):
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from tunekit.flow import run_train

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(8, seed=1))
    out = tmp_path / "out"
    run_train(load_config(None, base_config(qwen3_moe, data, out, template="qwen3", max_steps=2, learning_rate=1e-2)))
    assert "the routers (mlp.gate) stay frozen" in capsys.readouterr().out
    weights = load_file(str(out / "adapter_model.safetensors"))
    experts = {k: v for k, v in weights.items() if ".experts." in k}
    assert len(experts) == 2 * 2 * 2  # 2 layers x gate_up/down x A/B
    assert any("lora_B" in k and v.abs().max() > 0 for k, v in experts.items())  # B starts at zero: it trained
    assert not any(".mlp.gate." in k for k in weights)
    # float64 on both sides: tunekit merges the adapter for inference (W + s B A per expert), plain peft adds it in
    # the forward; only the rounding of those differs: ~2 * 128 * 2**-53 relative per matmul of width <= 128, ~1e-13
    # on logits below 10 after 2 layers. 1e-10 keeps a thousandfold margin, seven orders below a wrong or missing
    # adapter (> 1e-3, asserted below).
    base = AutoModelForCausalLM.from_pretrained(qwen3_moe, dtype=torch.float64, experts_implementation="eager")
    plain = PeftModel.from_pretrained(base, out).eval()
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(qwen3_moe),
            "adapter_name_or_path": str(out),
            "template": "qwen3",
            "dtype": "float64",
        },
    )
    ours = load_model(cfg, load_tokenizer(cfg), is_trainable=False)
    ids = torch.tensor([[5, 17, 99, 23, 42, 7, 64, 3]])
    with torch.no_grad():
        a, b = plain(ids).logits, ours(ids).logits
        c = AutoModelForCausalLM.from_pretrained(qwen3_moe, dtype=torch.float64, experts_implementation="eager")(
            ids
        ).logits
    assert a.dtype == b.dtype == torch.float64
    assert torch.allclose(a, b, atol=1e-10, rtol=0), (a - b).abs().max()
    assert (a - c).abs().max() > 1e-3
