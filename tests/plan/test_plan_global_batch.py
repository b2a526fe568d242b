"""`tunekit plan` states the global batch (devices x per-device batch x accumulation) and, on more than one device,
how to scale the learning rate with it and where that stops being safe (plan/global_batch.py)."""

from __future__ import annotations

import json

import pytest

from tunekit.cli.main import main
from tunekit.config import load_config
from tunekit.plan import make_plan
from tunekit.plan.global_batch import global_batch, lr_rule
from tunekit.plan.report import global_batch_lines

LORA = (
    "model_name_or_path: Qwen/Qwen2.5-0.5B\nfinetuning_type: lora\nper_device_train_batch_size: 4\n"
    "gradient_accumulation_steps: 2\ncutoff_len: 512\nlearning_rate: 1.0e-4\n"
)


def _plan_lines(capsys, tmp_path, text: str, *argv: str) -> tuple[list[str], dict]:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    common = ("plan", str(path), "--num-samples", "1000", "--model-config", "qwen2.5-0.5b", *argv)
    assert main(list(common)) == 0
    out = capsys.readouterr().out
    assert main([*common, "--json"]) == 0
    return out.splitlines(), json.loads(capsys.readouterr().out)


def test_one_device_prints_the_global_batch_and_no_advice(capsys, tmp_path):
    lines, plan = _plan_lines(capsys, tmp_path, LORA, "--gpus", "1")
    assert (
        "global batch: 8 samples per optimizer step (= 1 device x per-device batch 4 x gradient accumulation 2)"
        in (lines)
    )
    assert not [line for line in lines if line.startswith("learning rate:")]
    assert plan["global_batch"] == {
        "devices": 1,
        "per_device_batch": 4,
        "unit": "samples",
        "gradient_accumulation_steps": 2,
        "size": 8,
        "one_device_size": 8,
        "learning_rate": 1e-4,
        "lr_rule": "sqrt",
        "scaled_learning_rate": 1e-4,
        "advice": [],
    }


def test_four_devices_print_the_square_root_rule_for_adamw_and_ask_for_a_warm_up(capsys, tmp_path):
    lines, plan = _plan_lines(capsys, tmp_path, LORA, "--gpus", "4")
    start = lines.index(
        "global batch: 32 samples per optimizer step (= 4 devices x per-device batch 4 x gradient accumulation 2)"
    )
    assert lines[start + 1 : start + 4] == [
        "learning rate: the global batch is 4 x one device's (8 samples); if learning_rate 0.0001 was tuned on one "
        "device, adamw_torch_fused is Adam-family: the common rule scales it with the square root of the batch, "
        "0.0001 x sqrt(4) = 0.0002 (SGD-like optimizers: linearly, x 4).",
        "learning rate: the rules hold for moderate growth only: past 8 x one device's batch or about 8,192 samples "
        "per step they stop being safe (the first steps diverge, or a larger batch gains nothing per sample): raise "
        "it gradually after a warm-up and check the first steps' loss.",
        "learning rate: this config has no warm-up: add warmup_ratio: 0.05 to 0.1 (or warmup_steps) before scaling "
        "learning_rate up.",
    ]
    g = plan["global_batch"]
    assert (g["devices"], g["size"], g["one_device_size"], g["lr_rule"]) == (4, 32, 8, "sqrt")
    assert g["scaled_learning_rate"] == pytest.approx(2e-4, rel=1e-12)
    assert g["advice"] == lines[start + 1 : start + 4]
    assert plan["effective_batch_size"] == g["size"]  # the step count's batch is the same number


def test_sgd_scales_linearly_and_a_large_plan_is_told_it_is_past_the_safe_range(capsys, tmp_path):
    text = LORA + "optim: sgd\nwarmup_ratio: 0.1\n"
    lines, plan = _plan_lines(capsys, tmp_path, text, "--gpus", "8", "--nodes", "2")
    start = lines.index(
        "global batch: 128 samples per optimizer step (= 16 devices x per-device batch 4 x gradient accumulation 2)"
    )
    assert lines[start + 1] == (
        "learning rate: the global batch is 16 x one device's (8 samples); if learning_rate 0.0001 was tuned on one "
        "device, sgd is SGD-like: the common rule scales it linearly with the batch, 0.0001 x 16 = 0.0016 "
        "(Adam-family optimizers: with the square root, x 4)."
    )
    assert lines[start + 3] == (
        "learning rate: this plan is past that (16 x one device's batch, 128 samples per step): do not scale "
        "learning_rate by the full factor without trying the first steps at the smaller rates."
    )
    assert not lines[start + 4].startswith("learning rate:")  # a warm-up is set: no request for one
    assert plan["global_batch"]["scaled_learning_rate"] == pytest.approx(1.6e-3, rel=1e-12)


def test_token_budget_batches_count_tokens():
    cfg = load_config(
        None,
        {
            "model_name_or_path": "Qwen/Qwen2.5-0.5B",
            "padding_free": True,
            "max_tokens_per_batch": 2048,
            "gradient_accumulation_steps": 2,
            "warmup_steps": 10,
        },
    )
    g = make_plan(cfg, gpus=2, num_samples=100, model_config="qwen2.5-0.5b").global_batch
    assert (g["unit"], g["per_device_batch"], g["size"], g["one_device_size"]) == ("tokens", 2048, 8192, 4096)
    assert global_batch_lines(g)[:2] == [
        "global batch: at most 8,192 tokens per optimizer step (= 2 devices x max_tokens_per_batch 2,048 x gradient "
        "accumulation 2)",
        "learning rate: the global batch is 2 x one device's (4,096 tokens); if learning_rate 5e-05 was tuned on one "
        "device, adamw_torch_fused is Adam-family: the common rule scales it with the square root of the batch, "
        "5e-05 x sqrt(2) = 7.07e-05 (SGD-like optimizers: linearly, x 2).",
    ]


@pytest.mark.parametrize(
    "optim, rule",
    [("sgd", "linear"), ("adamw_torch", "sqrt"), ("adafactor", "sqrt")],
)
def test_the_rule_follows_the_optimizer(optim, rule):
    assert lr_rule(optim) == rule
    cfg = load_config(None, {"model_name_or_path": "m", "optim": optim, "learning_rate": 1e-3})
    factor = 9 if rule == "linear" else 3
    assert global_batch(cfg, 9)["scaled_learning_rate"] == pytest.approx(1e-3 * factor, rel=1e-12)
