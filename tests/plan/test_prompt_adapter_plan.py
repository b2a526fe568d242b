"""`tunekit plan` for P-Tuning v2 / prompt tuning: the trainable parameters are the prefix / prompt (counted exactly as
PEFT creates them), their weights, gradients and AdamW states in bytes equal the tensors of a real step, and prompt
tuning's virtual tokens lengthen the planned rows."""

from __future__ import annotations

import pytest
import torch

from tests.memory_helpers import measured_cfg, storage_bytes
from tunekit.config import load_config

METHODS = {
    "ptuning": dict(finetuning_type="ptuning", pre_seq_len=6),
    "ptuning-projected": dict(finetuning_type="ptuning", pre_seq_len=4, prefix_projection=True),
    "prompt": dict(finetuning_type="prompt", num_virtual_tokens=7),
}


@pytest.mark.parametrize("method", list(METHODS))
def test_the_prompt_s_weights_gradients_and_adam_states_are_planned_exactly(method, tiny_qwen):
    from transformers import Trainer, TrainingArguments

    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.memory import estimate_memory
    from tunekit.plan.training_setup import resolve_setup

    cfg = measured_cfg(tiny_qwen, template="qwen", **METHODS[method])
    model = load_model(cfg, load_tokenizer(cfg)).train()
    est = estimate_memory(load_shape(None, str(tiny_qwen)), resolve_setup(cfg)).components
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    assert est["base_weights"] + est["trainable_params"] == storage_bytes(params)
    assert est["trainable_params"] == storage_bytes(trainable) > 0

    ids = torch.randint(0, 200, (1, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    assert est["gradients"] == sum(p.grad.untyped_storage().nbytes() for p in trainable)
    args = TrainingArguments(output_dir="/tmp/unused", optim=cfg.optim, use_cpu=True, report_to="none")
    cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
    optimizer = cls(trainable, **kwargs)
    optimizer.step()
    state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    assert est["optimizer_states"] == storage_bytes(state)


def test_the_plan_reports_the_prompt_as_the_trainable_parameters(tiny_qwen):
    from tunekit.plan.planner import make_plan

    plans = {
        method: make_plan(measured_cfg(tiny_qwen, template="qwen", **opts), num_samples=8)
        for method, opts in METHODS.items()
    }
    lora = make_plan(measured_cfg(tiny_qwen, template="qwen"), num_samples=8)
    model = plans["ptuning"].model
    hidden, layers, kv = model["hidden_size"], model["num_layers"], model["num_kv_heads"] * model["head_dim"]
    assert plans["ptuning"].params["trainable"] == 6 * layers * 2 * kv
    assert plans["prompt"].params["trainable"] == 7 * hidden
    assert plans["ptuning"].setup["method"] == "ptuning" and plans["prompt"].setup["method"] == "prompt"
    assert plans["prompt"].seq_len == lora.seq_len + 7  # the virtual tokens run before every row
    assert plans["prompt"].seq_len_source.endswith("+ num_virtual_tokens")
    assert plans["ptuning"].seq_len == lora.seq_len
    assert all(plan.params["total"] == lora.params["total"] for plan in plans.values())  # the model's own


@pytest.mark.parametrize("options", [{}, {"use_cpu": True}], ids=["gpu-run", "cpu-run"])
def test_the_plan_of_a_prefix_has_no_gradient_checkpointing_under_auto(options, tiny_qwen):
    """peft refuses prefix tuning on a checkpointed model: ``auto`` plans off for ptuning with the reason (the planner
    and the run read one decision), so its memory is the plan's with gradient_checkpointing: false."""
    from tunekit.plan.planner import make_plan

    common = dict(model_name_or_path=str(tiny_qwen), template="qwen", cutoff_len=32, **METHODS["ptuning"], **options)
    auto = make_plan(load_config(None, common), num_samples=8)
    off = make_plan(load_config(None, dict(common, gradient_checkpointing=False)), num_samples=8)
    assert auto.decisions["gradient_checkpointing"] == {
        "on": False,
        "why": "auto: finetuning_type ptuning: its prefix reaches every layer's attention as a KV cache, which "
        "transformers' checkpointed decoder layers drop (a layer replayed in backward would write its keys into the "
        "cache again), and peft refuses prefix tuning on a checkpointed model",
    }
    assert auto.memory == off.memory and auto.setup == off.setup
    assert not [note for note in auto.notes if "gradient_checkpointing" in note or "gradient checkpointing" in note]


def test_auto_fit_never_proposes_gradient_checkpointing_for_a_prefix(tiny_qwen):
    """``--auto-fit`` climbs a ladder of set-ups; for ptuning it has no gradient-checkpointing rung (the schema refuses
    it), so what it proposes is a config ``tunekit train`` accepts."""
    from tunekit.plan.planner import make_plan

    common = dict(model_name_or_path=str(tiny_qwen), template="qwen", cutoff_len=32, per_device_train_batch_size=4)
    lora = make_plan(load_config(None, common), gpu_memory_gib=0.001, num_samples=8, auto_fit=True)
    assert "gradient checkpointing" in lora.fit["choice"] and lora.overrides["gradient_checkpointing"] is True
    cfg = load_config(None, dict(common, **METHODS["ptuning"]))
    plan = make_plan(cfg, gpu_memory_gib=0.001, num_samples=8, auto_fit=True)  # nothing fits: its best try
    assert plan.fit["fits"] is False and "gradient checkpointing" not in plan.fit["choice"]
    assert plan.overrides["gradient_checkpointing"] is False
    fitted = load_config(None, dict(cfg.model_dump(exclude_unset=True), **plan.overrides))  # accepted
    assert fitted.use_gradient_checkpointing is False
