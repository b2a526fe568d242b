"""LoRA on DeepSeek-V2/V3 and gpt-oss (model/moe.py): attention and the experts' fused weights adapted, the routers
frozen; DeepSeek's dense-layer MLP and shared experts stay frozen because PEFT reads their names (gate_proj, up_proj,
down_proj) as the fused experts of a deepseek model; a 2-step run saves an adapter that plain peft reloads."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import alpaca_records, base_config, write_dataset
from tunekit.config import load_config
from tunekit.errors import ConfigError
from tunekit.model.loader import load_model, load_tokenizer
from tunekit.model.moe import moe_start_lines
from tunekit.tiny.text import build_tiny_model

R, H = 8, 64  # lora_rank; the tiny models' hidden size
# DeepSeek tiny (tiny/config.py): 4 heads, q compressed to 32, k/v to 16, head widths 16 (no rope) + 8 (rope), v 16
DEEPSEEK_ATTENTION = {
    "q_a_proj": (H, 32),
    "q_b_proj": (32, 4 * (16 + 8)),
    "kv_a_proj_with_mqa": (H, 16 + 8),
    "kv_b_proj": (16, 4 * (16 + 16)),
    "o_proj": (4 * 16, H),
}
GPT_OSS_ATTENTION = {"q_proj": (H, H), "k_proj": (H, 32), "v_proj": (H, 32), "o_proj": (H, H)}


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("dsv3") / "model", like="deepseek-v3", seed=0)


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("gptoss") / "model", like="gpt-oss-20b", seed=0)


def _lora(model_dir, **options):
    base = {"model_name_or_path": str(model_dir), "template": "qwen", "finetuning_type": "lora", "lora_rank": R}
    cfg = load_config(None, base | options)
    return load_model(cfg, load_tokenizer(cfg), is_trainable=True), cfg


def _linear_lora(layers: dict) -> int:
    return sum(R * (i + o) for i, o in layers.values())


def _fused_lora(experts: int, *shapes: tuple[int, int]) -> int:
    """PEFT's LoRA on a fused ``experts x a x b`` weight: rank r per expert on both sides, r E (a + b)."""
    return sum(R * experts * (a + b) for a, b in shapes)


def test_deepseek_lora_all_adapts_latent_attention_and_experts_not_the_shared_experts_or_router(deepseek):
    model, cfg = _lora(deepseek)
    peft = model.peft_config["default"]
    assert set(peft.target_modules) == set(DEEPSEEK_ATTENTION)
    assert sorted(peft.target_parameters) == ["mlp.experts.down_proj", "mlp.experts.gate_up_proj"]
    assert not peft.rank_pattern and not peft.alpha_pattern  # PEFT's v4 remap would double gate_up_proj's rank
    trainable = {n: p.numel() for n, p in model.named_parameters() if p.requires_grad}
    assert all("lora_" in n for n in trainable)
    assert not any(".mlp.gate." in n or "shared_experts" in n or "layers.0.mlp" in n for n in trainable)
    # 2 layers of attention; layer 0 dense, layer 1: 8 experts of gate_up (256 x 64) and down (64 x 128)
    expected = 2 * _linear_lora(DEEPSEEK_ATTENTION) + _fused_lora(8, (256, H), (H, 128))
    assert sum(trainable.values()) == expected
    assert moe_start_lines(model, cfg) == [
        "mixture of experts: 8 experts per layer, top-2 routing, 1 sparse layers",
        "LoRA on kv_a_proj_with_mqa, kv_b_proj, o_proj, q_a_proj, q_b_proj and the experts' fused weights "
        "mlp.experts.down_proj, mlp.experts.gate_up_proj (PEFT target_parameters); the routers (mlp.gate) stay frozen",
        "the linear layers named down_proj, gate_proj, up_proj (dense layers' MLP, shared experts) stay frozen: PEFT "
        "reads those names as the fused experts of a deepseek_v3 model",
    ]


def test_deepseek_lora_on_a_dense_or_shared_mlp_name_is_refused_with_the_reason(deepseek):
    with pytest.raises(ConfigError) as err:
        _lora(deepseek, lora_target="q_a_proj,gate_proj,up_proj")
    assert str(err.value) == (
        "lora_target names gate_proj, up_proj: for a deepseek_v3 model PEFT reads these names as the experts' fused "
        "weights (its compatibility with transformers 4 adapters), so LoRA cannot adapt the linear layers of that "
        "name (the dense layers' MLP, the shared experts); name the fused weights (down_proj, gate_up_proj) or "
        "experts instead, or use lora_target: all."
    )


def test_gpt_oss_lora_all_adapts_attention_and_transposed_experts_not_router_sinks_or_biases(gpt_oss):
    model, cfg = _lora(gpt_oss)
    assert model.config.get_text_config()._attn_implementation == "eager"  # no sdpa path with attention sinks
    peft = model.peft_config["default"]
    assert set(peft.target_modules) == set(GPT_OSS_ATTENTION)
    assert sorted(peft.target_parameters) == ["mlp.experts.down_proj", "mlp.experts.gate_up_proj"]
    trainable = {n: p.numel() for n, p in model.named_parameters() if p.requires_grad}
    assert all("lora_" in n for n in trainable)  # sinks, router, expert biases frozen
    expected = 2 * (_linear_lora(GPT_OSS_ATTENTION) + _fused_lora(4, (H, 2 * 256), (256, H)))
    assert sum(trainable.values()) == expected
    assert moe_start_lines(model, cfg)[1].endswith("the routers (mlp.router) stay frozen")


@pytest.mark.parametrize("family", ["deepseek", "gpt_oss"])
def test_two_step_run_saves_an_adapter_plain_peft_reloads(family, request, tmp_path):
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from tunekit.flow import run_train

    folder = request.getfixturevalue(family)
    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(8, seed=1))
    out = tmp_path / "out"
    extra = {"moe_aux_loss_coef": 0.1} if family == "gpt_oss" else {}  # DeepSeek has no router loss to add
    run_train(load_config(None, base_config(folder, data, out, max_steps=2, learning_rate=1e-2, **extra)))
    weights = load_file(str(out / "adapter_model.safetensors"))
    experts = [k for k, v in weights.items() if ".mlp.experts." in k and "lora_B" in k and v.abs().max() > 0]
    assert len(experts) == (2 if family == "deepseek" else 4)  # gate_up and down of each sparse layer trained
    # float64 on both sides: only the rounding of a merged (tunekit) vs an added (peft) adapter differs, ~1e-13 on
    # logits below 10 after 2 layers (see test_moe_lora.py); 1e-10 keeps a thousandfold margin. DeepSeek's router
    # computes its weights in float32 whatever the dtype (transformers' DeepseekV3TopkRouter): a 1e-13 input change
    # may round a weight to its float32 neighbour (2**-24 relative), scaling an expert output by it; with top-2
    # weights x routed_scaling_factor 2.5 on logits below 10: <= 10 x 2**-24 x 2 x 2.5 ~ 3e-6, so 1e-5 there
    # (still a hundred times below the adapter's effect, > 1e-3 asserted below).
    tol = 1e-5 if family == "deepseek" else 1e-10
    plain_kwargs = {"dtype": torch.float64, "experts_implementation": "eager", "attn_implementation": "eager"}
    plain = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(folder, **plain_kwargs), out).eval()
    options = {"model_name_or_path": str(folder), "adapter_name_or_path": str(out), "template": "qwen"}
    cfg = load_config(None, options | {"dtype": "float64"})
    ours = load_model(cfg, load_tokenizer(cfg), is_trainable=False)
    ids = torch.tensor([[5, 17, 99, 23, 42, 7, 64, 3]])
    with torch.no_grad():
        a, b = plain(ids).logits, ours(ids).logits
        c = AutoModelForCausalLM.from_pretrained(folder, **plain_kwargs)(ids).logits
    assert torch.allclose(a, b, atol=tol, rtol=0), (a - b).abs().max()
    assert (a - c).abs().max() > 1e-3  # the adapter changes the model


def test_the_peft_private_tables_read_still_exist():
    """model/moe.py peft_remapped_linears reads PEFT's private rewrite tables (pinned peft==0.21.2 in
    constraints.txt): if an upgrade renames them, this fails instead of the frozen layers going unreported."""
    from peft.utils import transformers_weight_conversion as conversion

    family = conversion._MODEL_TO_CONVERSION_PATTERN["deepseek_v3"]
    assert family in conversion._MOE_FUSED_TARGETS
    assert {"gate_proj", "up_proj", "down_proj"} <= set(conversion._MOE_TARGET_MODULE_MAPPING[family])
