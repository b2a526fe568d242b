"""``gradient_checkpointing: auto``: off only when the planned peak without it fits the device with a wide margin."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tunekit.config import load_config
from tunekit.plan import make_plan
from tunekit.plan.checkpointing import CPU_SHARE, GPU_SHARE, decide, resolve_gradient_checkpointing
from tunekit.plan.gpus import find_gpu
from tunekit.plan.memory import GiB

QWEN7B_LORA = {"model_name_or_path": "qwen2.5-7b", "finetuning_type": "lora", "cutoff_len": 4096,
               "per_device_train_batch_size": 1, "template": "qwen"}


def test_decide_is_a_threshold_on_the_planned_peak():
    assert decide(10 * GiB, 10 * GiB, "x").enabled is False
    on = decide(10 * GiB + 1, 10 * GiB, "x")
    assert on.enabled is True and "over 10.0 GiB (x)" in on.message()
    assert decide(1 * GiB, 10 * GiB, "x").message().startswith("gradient checkpointing: off (auto: without it this run needs 1.00 GiB")


def test_the_default_is_auto_and_counts_as_on_until_decided():
    cfg = load_config(None, {})
    assert cfg.gradient_checkpointing == "auto" and cfg.use_gradient_checkpointing is True


@pytest.mark.parametrize("given", [{"gradient_checkpointing": True}, {"gradient_checkpointing": False},
                                   {"disable_gradient_checkpointing": True}])
def test_an_explicit_choice_is_kept(given):
    cfg = load_config(None, {**QWEN7B_LORA, **given})
    resolved, decision = resolve_gradient_checkpointing(cfg, gpu=find_gpu("H200"))
    assert decision is None and resolved is cfg


def test_7b_lora_at_4k_keeps_it_on_a_24_gib_gpu_and_drops_it_on_an_h200():
    cfg = load_config(None, QWEN7B_LORA)
    small, d_small = resolve_gradient_checkpointing(cfg, gpu=find_gpu("RTX-4090"))
    big, d_big = resolve_gradient_checkpointing(cfg, gpu=find_gpu("H200"))
    assert small.gradient_checkpointing is True and big.gradient_checkpointing is False
    # the decision uses the planner's own figure for this run without checkpointing
    plan = make_plan(load_config(None, {**QWEN7B_LORA, "gradient_checkpointing": False}), gpu="H200", num_samples=100)
    assert d_big.peak_without_bytes / GiB == pytest.approx(plan["memory"]["total_gib"], abs=0.01)
    assert d_big.budget_bytes == pytest.approx(find_gpu("H200").memory_gib * GiB * GPU_SHARE)
    assert "80% of the RTX-4090's 24 GiB" in d_small.message()


def test_make_plan_shows_the_same_decision():
    cfg = load_config(None, QWEN7B_LORA)
    assert make_plan(cfg, gpu="RTX-4090", num_samples=10)["setup"]["gradient_checkpointing"] is True
    plan = make_plan(cfg, gpu="H200", num_samples=10)
    assert plan["setup"]["gradient_checkpointing"] is False
    assert any(n.startswith("gradient checkpointing: off (auto:") for n in plan["notes"])


def test_cpu_budget_is_a_share_of_ram_per_process(tiny_qwen, monkeypatch):
    import os

    cfg = load_config(None, {"model_name_or_path": str(tiny_qwen), "cutoff_len": 512, "use_cpu": True})
    _, one = resolve_gradient_checkpointing(cfg, world_size=1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    resolved, two = resolve_gradient_checkpointing(cfg, world_size=2)
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert one.budget_bytes == pytest.approx(ram * CPU_SHARE) and two.budget_bytes == pytest.approx(ram * CPU_SHARE / 2)
    assert resolved.gradient_checkpointing is False and "/ 2 processes" in two.message()


def test_a_model_the_planner_cannot_read_keeps_it_on(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    cfg = load_config(None, {"model_name_or_path": str(tmp_path), "use_cpu": True})
    resolved, decision = resolve_gradient_checkpointing(cfg)
    assert resolved.gradient_checkpointing is True and "could not be made" in decision.reason
