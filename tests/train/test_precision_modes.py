"""pure_bf16 (weights, gradients and optimizer states in bf16, no fp32 master copy, no autocast) and fp8's refusal
before the model loads on a machine without an FP8 GPU."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import alpaca_records, base_config, logged_losses, write_dataset
from tunekit.config import load_config


def test_pure_bf16_trains_in_bf16_and_is_planned_so(tiny_qwen, tmp_path):
    from safetensors.torch import load_file
    from transformers import TrainerCallback

    from tunekit.flow import run_train
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.memory import estimate_memory
    from tunekit.plan.training_setup import resolve_setup
    from tunekit.train import run as run_module

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(8))
    out = tmp_path / "out"
    cfg = load_config(
        None,
        base_config(
            tiny_qwen,
            data,
            out,
            finetuning_type="full",
            pure_bf16=True,
            max_steps=3,
            learning_rate=1e-3,
            optim="adamw_torch",
        ),
    )
    seen = {}

    class Probe(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, optimizer=None, **kw):
            seen["params"] = {p.dtype for p in model.parameters()}
            inner = getattr(optimizer, "optimizer", optimizer)
            states = [t for s in inner.state.values() for t in s.values() if torch.is_tensor(t)]
            seen["moments"] = {t.dtype for t in states if t.dim() > 0}
            seen["state_bytes"] = sum(t.untyped_storage().nbytes() for t in states)

    build = run_module.get_stage("sft").build_trainer

    def with_probe(*a, **k):
        trainer = build(*a, **k)
        trainer.add_callback(Probe())
        return trainer

    stage = run_module.get_stage("sft")
    stage.build_trainer, original = with_probe, stage.build_trainer
    try:
        run_train(cfg)
    finally:
        stage.build_trainer = original
    assert seen["params"] == {torch.bfloat16} and seen["moments"] == {torch.bfloat16}
    assert {t.dtype for t in load_file(out / "model.safetensors").values()} == {torch.bfloat16}
    losses = logged_losses(out)
    assert losses[-1] < losses[0]
    est = estimate_memory(load_shape(None, str(tiny_qwen)), resolve_setup(cfg)).components
    assert est["master_weights"] == 0 and est["optimizer_states"] == seen["state_bytes"]


def test_fp8_is_refused_on_cpu_before_the_model_loads(tiny_qwen, tmp_path, monkeypatch):
    from tunekit.errors import ConfigError
    from tunekit.flow import run_train
    from tunekit.train import run

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(4))
    monkeypatch.setattr(run, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))  # run.build_model's
    with pytest.raises(
        ConfigError, match=r"fp8 training needs an NVIDIA GPU with FP8 support \(Hopper or newer\) and none is visible"
    ):
        run_train(load_config(None, base_config(tiny_qwen, data, tmp_path / "o", finetuning_type="full", fp8=True)))


def test_pure_bf16_with_bf16_is_refused():
    from tunekit.errors import ConfigError

    with pytest.raises(
        ConfigError, match="pure_bf16 trains without autocast, so bf16/fp16 mixed precision must be off"
    ):
        load_config(None, {"pure_bf16": True, "bf16": True})
