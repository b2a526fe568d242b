"""The planner's mixture-of-experts activations (plan/moe_activations.py) against what autograd keeps in a real forward
pass of tiny Qwen3-MoE, Qwen2-MoE (shared expert) and Mixtral models: router softmax and top-k, the routed rows the
grouped expert matmuls keep, and the adapted fused weights that LoRA on the experts forms in every forward; with and
without gradient checkpointing, within the bound of the dense activation tests (tests/plan/test_plan_memory.py)."""

from __future__ import annotations

import pytest
import torch

from tests.memory_helpers import saved_storage_bytes
from tunekit.config import load_config
from tunekit.model.elementwise_recompute import enable_for_training
from tunekit.model.finetuning import apply_finetuning
from tunekit.plan.activations import layer_kinds, saved_bytes
from tunekit.plan.architectures import load_shape
from tunekit.plan.memory import GiB
from tunekit.plan.moe_activations import expert_width, routed_saved_const, routed_saved_per_token
from tunekit.plan.params import count_params
from tunekit.plan.planner import make_plan
from tunekit.plan.training_setup import planned_machine, resolve_setup
from tunekit.tiny.text import build_tiny_model
from tunekit.train.decisions import decide_features

ACTIVATION_BOUND = 0.10  # the dense models' bound (test_activation_bytes_within_10_percent)
FAMILIES = {"qwen3_moe": "qwen3-30b-a3b", "qwen2_moe": "qwen2-57b-a14b", "mixtral": "mixtral-8x7b"}
METHODS = {
    "lora-bf16": dict(finetuning_type="lora", bf16=True),  # bf16 base, fp32 adapters (experts too), bf16 autocast
    "lora-attention-bf16": dict(finetuning_type="lora", lora_target="q_proj,v_proj", bf16=True),  # experts frozen
    "lora-experts-fp32": dict(finetuning_type="lora", lora_target="experts"),  # no Linear adapted
    "full-fp32": dict(finetuning_type="full"),  # the router trains
}


@pytest.fixture(scope="module")
def moe_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe-act")
    return {family: build_tiny_model(root / family, like=like, seed=0) for family, like in FAMILIES.items()}


def _cfg(folder, seq: int, batch: int, gc: bool, opts: dict):
    return load_config(
        None,
        dict(
            model_name_or_path=str(folder),
            template="qwen",
            cutoff_len=seq,
            per_device_train_batch_size=batch,
            gradient_checkpointing=gc,
            chunked_lm_loss=False,  # the measurement runs HF's own loss (labels=)
            elementwise_recompute=True,
            use_cpu=True,
            **opts,
        ),
    )


def _model(folder, cfg):
    """The model as tunekit train builds it: the family's default experts implementation (grouped_mm), the method,
    elementwise_recompute as decided."""
    from transformers import AutoConfig, AutoModelForCausalLM

    hf = AutoConfig.from_pretrained(folder)
    hf._attn_implementation = "sdpa"
    hf.use_cache = False
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16 if cfg.bf16 else torch.float32)
    if cfg.use_gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model = apply_finetuning(model, cfg)
    enable_for_training(model, decide_features(cfg, planned_machine(cfg)).elementwise_recompute.detail)
    return model.train()


def _measured(model, ids, autocast: bool) -> int:
    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return model(input_ids=ids, labels=ids).loss

    return saved_storage_bytes(model, forward)


@pytest.mark.parametrize("gc", [False, True], ids=["no-gc", "gc"])
@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_moe_activation_bytes_within_the_dense_bound(family, method, gc, moe_folders):
    folder = moe_folders[family]
    shape = load_shape(None, str(folder))
    errors = []
    model = _model(folder, _cfg(folder, 32, 1, gc, METHODS[method]))
    for seq, batch in ((32, 1), (64, 2)):
        cfg = _cfg(folder, seq, batch, gc, METHODS[method])
        setup = resolve_setup(cfg).with_(padded=False)  # no attention mask, like the ids below
        planned = saved_bytes(shape, setup, count_params(shape, setup))["total"]
        torch.manual_seed(1)
        measured = _measured(model, torch.randint(0, shape.vocab, (batch, seq)), cfg.bf16)
        errors.append((seq, batch, planned, measured, round(planned / measured - 1, 4)))
    assert all(abs(e[-1]) < ACTIVATION_BOUND for e in errors), errors


def test_lora_on_the_experts_adds_the_adapted_weights_and_the_routed_rows(moe_folders):
    """LoRA on the fused experts against LoRA on attention only, one sparse layer term by term: the adapted weights
    W + s B A (E x out x in) and their cast factors E r (in + out) that PEFT forms in every forward, in bf16, and the
    routed rows the grouped matmuls then keep (k rows of h + W per token)."""
    folder = moe_folders["qwen3_moe"]
    shape = load_shape(None, str(folder))
    moe, h, T = shape.moe, shape.hidden, 64
    assert (moe.experts, moe.top_k, expert_width(shape), moe.normalized, moe.fp32_scores) == (4, 2, 128, True, False)
    attention = dict(METHODS["lora-bf16"], lora_target="q_proj,k_proj,v_proj,o_proj")
    planned = {}
    for name, opts in (("all", METHODS["lora-bf16"]), ("attention", attention)):
        setup = resolve_setup(_cfg(folder, T, 1, False, opts))
        planned[name] = saved_bytes(shape, setup, count_params(shape, setup))["layers"]
    r, W, E, k = 8, 128, 4, 2
    fused = 2 * E * ((2 * W) * h + r * (h + 2 * W)) + 2 * E * (h * W + r * (W + h))
    assert planned["all"] - planned["attention"] == shape.layers * (fused + T * 2 * k * (h + W))


def test_qwen3_30b_a3b_lora_plans_its_routed_rows_and_adapted_experts():
    """docs/memory-model.md's Qwen3-30B-A3B arithmetic (h 2048, E 128, k 8, W 768, 48 layers; LoRA r 8 on everything,
    bf16, 2048 tokens): 115,508 routed bytes per token and layer; 1.125 GiB of adapted fused weights per layer, which
    every layer holds without checkpointing and the recomputed layer holds with it."""
    options = dict(model_name_or_path="qwen3-30b-a3b", finetuning_type="lora", lora_rank=8, bf16=True)
    options.update(cutoff_len=2048, per_device_train_batch_size=1, template="qwen3")
    shape = load_shape("qwen3-30b-a3b", None)
    setup = resolve_setup(load_config(None, dict(options, gradient_checkpointing=True)), seq_len=2048)
    kind = layer_kinds(shape, setup, count_params(shape, setup))[-1]
    h, E, k, W, r = 2048, 128, 8, 768, 8
    router = 4 * E + 8 * k + 4 + 4 * k
    assert (
        routed_saved_per_token(shape, setup, kind, 2, False)
        == router + 2 * k * (h + 3 * W) + 2 * k * (h + W) + 2 * k + 24 * k
        == 115_508
    )
    adapted = 2 * E * (2 * W * h + h * W)  # W + s B A of gate_up_proj and down_proj, bf16
    assert adapted == 1_207_959_552
    assert routed_saved_const(shape, setup, kind) == 4 * E + adapted + 2 * E * r * ((h + 2 * W) + (W + h))
    with_gc = make_plan(load_config(None, dict(options, gradient_checkpointing=True)), gpu="H100", num_samples=8)
    without = make_plan(load_config(None, dict(options, gradient_checkpointing=False)), gpu="H100", num_samples=8)
    assert with_gc.memory["activations"] > 1.6 * adapted / GiB  # the recomputed layer's adapted experts
    assert without.memory["activations"] > 48 * adapted / GiB  # every layer keeps its own
    assert with_gc.fits is True and without.fits is False
