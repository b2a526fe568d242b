"""`tunekit plan` on a mixture-of-experts model (plan/moe.py): total parameters exactly those of transformers' model
built on the meta device, active parameters per token, both printed; LoRA on the fused experts counted as tunekit
builds it."""

from __future__ import annotations

import json

import pytest
import torch

from tunekit.cli.main import main
from tunekit.config import load_config
from tunekit.plan import make_plan
from tunekit.plan.architectures import load_shape
from tunekit.plan.builtin_shapes import BUILTIN
from tunekit.tiny.text import build_tiny_model


@pytest.fixture(
    scope="module", params=[("qwen3-30b-a3b", "qwen3"), ("qwen2-57b-a14b", "qwen")], ids=["qwen3", "qwen2"]
)
def tiny_moe(request, tmp_path_factory):
    """A tiny Qwen3-MoE (experts only) and Qwen2-MoE (a shared expert and its gate beside them), with its template."""
    like, template = request.param
    return build_tiny_model(tmp_path_factory.mktemp("moe") / "model", like=like, seed=0), template


def _meta_count(config: dict) -> int:
    """Every parameter of transformers' own model for ``config``, built on the meta device, shared ones once."""
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {k: v for k, v in config.items() if k not in ("model_type", "architectures", "transformers_version")}
    hf = AutoConfig.for_model(config["model_type"], **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf)
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once


def _idle_experts(cfg: dict) -> int:
    """Parameters a token does not reach: per layer, the (E - k) experts it is not routed to, each 3 x hidden x width
    (gate, up and down projections)."""
    e, k = cfg.get("num_experts") or cfg["num_local_experts"], cfg["num_experts_per_tok"]  # saved under the latter
    return cfg["num_hidden_layers"] * (e - k) * 3 * cfg["hidden_size"] * cfg["moe_intermediate_size"]


def test_qwen3_30b_a3b_total_is_transformers_count_and_active_is_3_35b():
    cfg = BUILTIN["qwen3-30b-a3b"]
    shape = load_shape("qwen3-30b-a3b", None)
    total = _meta_count(cfg)
    assert shape.total_params == shape.moe.total == total
    assert shape.moe.active == total - _idle_experts(cfg)
    assert (round(total / 1e9, 2), round(shape.moe.active / 1e9, 2)) == (30.53, 3.35)  # published: 30.5B, 3.3B
    assert (shape.moe.experts, shape.moe.top_k, shape.moe.sparse_layers) == (128, 8, 48)


def test_the_tiny_model_total_active_and_lora_match_the_model_tunekit_trains(tiny_moe):
    from tunekit.model.loader import load_model, load_tokenizer

    folder, template = tiny_moe
    cfg = json.loads((folder / "config.json").read_text())
    shape = load_shape(None, str(folder))
    assert shape.total_params == _meta_count(cfg)
    assert shape.moe.active == shape.total_params - _idle_experts(cfg)
    options = {"model_name_or_path": str(folder), "template": template, "finetuning_type": "lora"}
    plan = make_plan(load_config(None, options), num_samples=100)
    model = load_model(load_config(None, options), load_tokenizer(load_config(None, options)), is_trainable=True)
    assert plan.params["lora"] == sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_the_printed_plan_states_total_and_active_parameters(tmp_path, capsys):
    path = tmp_path / "lora.yaml"
    path.write_text(
        "model_name_or_path: Qwen/Qwen3-30B-A3B-Instruct-2507\nfinetuning_type: lora\nlora_rank: 8\nbf16: true\n"
        "per_device_train_batch_size: 1\ngradient_accumulation_steps: 8\ncutoff_len: 2048\n"
    )
    assert main(["plan", str(path), "--num-samples", "1000", "--gpu", "H100"]) == 0
    out = capsys.readouterr().out
    shape = load_shape("qwen3-30b-a3b", None)
    routed = shape.moe.routed
    assert routed == 48 * 128 * 3 * 2048 * 768
    assert (
        f"mixture of experts: {shape.total_params / 1e9:.2f}B parameters in total, {shape.moe.active / 1e9:.2f}B "
        f"active per token (8 of 128 experts in each of 48 sparse layers; routed experts {routed / 1e9:.2f}B)"
    ) in " ".join(out.split())


def test_qwen3_30b_a3b_time_follows_its_active_parameters():
    """The FLOPs estimate multiplies the weights a token goes through: attention, routers and 8 of the 128 experts
    of each layer, and the LM head (3.35B active less the embedding lookup and the norms), not the 30.5B in total."""
    from tunekit.plan.params import count_params
    from tunekit.plan.time import flops_per_token
    from tunekit.plan.training_setup import resolve_setup

    shape = load_shape("qwen3-30b-a3b", None)
    options = dict(model_name_or_path="qwen3-30b-a3b", template="qwen3", finetuning_type="full", cutoff_len=2048)
    options["gradient_checkpointing"] = False
    setup = resolve_setup(load_config(None, options))
    norms = sum(k for n, k in shape.layer_param_names if "norm" in n) * shape.layers
    norms += sum(k for n, k in shape.other_param_names if "norm" in n)
    matmul = shape.moe.active - shape.embed_params - norms  # the LM head, attention, routers, the chosen experts
    assert 3.0e9 < matmul < 3.1e9
    fpt = flops_per_token(shape, setup, count_params(shape, setup), 2048)
    attention = 48 * 2048 * 2 * 32 * 128  # causal: half of the scores' and weighted values' 2 x 2 x s x q
    assert fpt["forward"] == 2 * matmul + attention
    assert fpt["total"] == 3 * fpt["forward"]  # full fine-tuning, no checkpointing: backward twice the forward
    plan = make_plan(load_config(None, options), gpu="H100", num_samples=1000)
    assert plan.time["flops_per_token"] == fpt["total"] < 6 * 3.1e9 + 3 * attention
