"""``gradient_checkpointing: auto``: off only when the planned peak without it fits the device with a wide margin."""

from __future__ import annotations

import pytest

from tunekit.config import load_config
from tunekit.plan import make_plan
from tunekit.plan.checkpointing import CPU_SHARE, GPU_SHARE, decide, resolve_gradient_checkpointing
from tunekit.plan.gpus import find_gpu
from tunekit.plan.memory import GiB

QWEN7B_LORA = {
    "model_name_or_path": "qwen2.5-7b",
    "finetuning_type": "lora",
    "cutoff_len": 4096,
    "per_device_train_batch_size": 1,
    "template": "qwen",
}


def test_decide_is_a_threshold_on_the_planned_peak():
    assert decide(10 * GiB, 10 * GiB, "x").enabled is False
    on = decide(10 * GiB + 1, 10 * GiB, "x")
    assert on.enabled is True and "over 10.0 GiB (x)" in on.message()
    assert (
        decide(1 * GiB, 10 * GiB, "x")
        .message()
        .startswith("gradient checkpointing: off (auto: without it this run needs 1.00 GiB")
    )


def test_the_default_is_auto_and_counts_as_on_until_decided():
    cfg = load_config(None, {})
    assert cfg.gradient_checkpointing == "auto" and cfg.use_gradient_checkpointing is True


@pytest.mark.parametrize(
    "given",
    [{"gradient_checkpointing": True}, {"gradient_checkpointing": False}, {"disable_gradient_checkpointing": True}],
)
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
    assert d_big.peak_without_bytes / GiB == pytest.approx(plan.memory["total_gib"], abs=0.01)
    assert d_big.budget_bytes == pytest.approx(find_gpu("H200").memory_gib * GiB * GPU_SHARE)
    assert "80% of the RTX-4090's 24 GiB" in d_small.message()


def test_make_plan_shows_the_same_decision():
    cfg = load_config(None, QWEN7B_LORA)
    assert make_plan(cfg, gpu="RTX-4090", num_samples=10).setup["gradient_checkpointing"] is True
    plan = make_plan(cfg, gpu="H200", num_samples=10)
    assert plan.setup["gradient_checkpointing"] is False
    assert any(n.startswith("gradient checkpointing: off (auto:") for n in plan.notes)


def test_cpu_budget_is_a_share_of_ram_per_process(tiny_qwen, monkeypatch):
    import os

    cfg = load_config(None, {"model_name_or_path": str(tiny_qwen), "cutoff_len": 512, "use_cpu": True})
    _, one = resolve_gradient_checkpointing(cfg, world_size=1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    resolved, two = resolve_gradient_checkpointing(cfg, world_size=2)
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert one.budget_bytes == pytest.approx(ram * CPU_SHARE) and two.budget_bytes == pytest.approx(
        ram * CPU_SHARE / 2
    )
    assert resolved.gradient_checkpointing is False and "/ 2 processes" in two.message()


def test_a_plan_that_cannot_be_made_is_an_error_naming_why(tmp_path):
    """No silent fallback to checkpointing on: the error names the option, the model, the cause and the fix."""
    from tunekit.errors import ConfigError

    (tmp_path / "config.json").write_text("{not json")
    cfg = load_config(None, {"model_name_or_path": str(tmp_path), "use_cpu": True})
    with pytest.raises(ConfigError) as err:
        resolve_gradient_checkpointing(cfg)
    message = str(err.value)
    assert message.startswith(
        f"gradient_checkpointing: auto decides from the memory plan of {tmp_path}, which could not be made ("
    ) and message.endswith("): set gradient_checkpointing: true or false.")
    assert "config.json" in message and "\n" not in message


def test_the_plan_is_made_while_a_zero3_config_is_live(tiny_qwen):
    """tunekit train decides gradient_checkpointing: auto after TrainingArguments made its DeepSpeed config live in the
    process; under ZeRO-3 transformers then builds every model under deepspeed.zero.Init, which cannot partition the
    planner's meta-device model. The plan is the same as without the live config."""
    from transformers.integrations import HfDeepSpeedConfig, is_deepspeed_zero3_enabled

    from tunekit.train.engines.deepspeed_config import read_deepspeed

    cfg = load_config(
        None,
        {
            "model_name_or_path": str(tiny_qwen),
            "cutoff_len": 64,
            "use_cpu": True,
            "finetuning_type": "full",
            "deepspeed": "z3",
        },
    )
    _, plain = resolve_gradient_checkpointing(cfg, world_size=2)
    live = HfDeepSpeedConfig(read_deepspeed("z3").config)  # what TrainingArguments(deepspeed=...) sets up
    try:
        assert is_deepspeed_zero3_enabled()
        resolved, decision = resolve_gradient_checkpointing(cfg, world_size=2)
    finally:
        del live
    assert not is_deepspeed_zero3_enabled()
    assert decision == plain and decision.peak_without_bytes is not None
    assert resolved.gradient_checkpointing is False  # a tiny model fits half the RAM without it


def test_the_data_s_longest_row_decides_not_cutoff_len():
    """7B LoRA bf16, cutoff 4096 on a 40 GiB A100: at cutoff_len it checkpoints 14 layers (12 with
    ``elementwise_recompute: true``, which a GPU run leaves off unless asked for: train/decisions); when the data's
    longest row is 997 tokens (padded to 1000) the run fits without it, and the peak is the
    planner's at --seq-len 1000."""
    cfg = load_config(None, {**QWEN7B_LORA, "bf16": True})
    a100 = find_gpu("A100-40GB")
    at_cutoff, d_cutoff = resolve_gradient_checkpointing(cfg, gpu=a100)
    assert (at_cutoff.gradient_checkpointing, at_cutoff.gradient_checkpointing_layers) == (True, 14)
    asked, _ = resolve_gradient_checkpointing(cfg.model_copy(update={"elementwise_recompute": True}), gpu=a100)
    assert asked.gradient_checkpointing_layers == 12  # fewer layers: the recipes save activation memory
    assert d_cutoff.message().endswith("planned at 4096 tokens per row, from cutoff_len)")
    measured, d_measured = resolve_gradient_checkpointing(cfg, gpu=a100, longest_row=997)
    assert measured.gradient_checkpointing is False and measured.gradient_checkpointing_layers is None
    assert d_measured.message().endswith("planned at 1000 tokens per row, from measured (longest row, padded))")
    plan = make_plan(
        load_config(None, {**QWEN7B_LORA, "bf16": True, "gradient_checkpointing": False}),
        gpu="A100-40GB",
        num_samples=10,
        seq_len=1000,
    )
    assert d_measured.peak_without_bytes / GiB == pytest.approx(plan.memory["total_gib"], abs=0.01)
    # a row longer than cutoff_len is cut to it: planned as cutoff_len
    _, d_long = resolve_gradient_checkpointing(cfg, gpu=a100, longest_row=9000)
    assert d_long.peak_without_bytes == d_cutoff.peak_without_bytes


def test_memory_seq_len_pads_cuts_and_adds_the_rollout():
    from tunekit.plan.training_setup import memory_seq_len

    cfg = load_config(None, {**QWEN7B_LORA, "cutoff_len": 1024, "pad_to_multiple_of": 64})
    assert memory_seq_len(cfg) == (1024, "cutoff_len")
    assert memory_seq_len(cfg, 65) == (128, "measured (longest row, padded)")
    assert memory_seq_len(cfg, 1000)[0] == 1024 and memory_seq_len(cfg, 5000)[0] == 1024
    ppo = load_config(
        None,
        {**QWEN7B_LORA, "cutoff_len": 1024, "stage": "ppo", "generation_max_new_tokens": 100, "reward_model": "rm"},
    )
    assert memory_seq_len(ppo) == (1124, "cutoff_len + generation_max_new_tokens")


def test_train_decides_at_the_tokenized_data_s_longest_row(tiny_qwen, tmp_path, capsys):
    """``tunekit train`` decides once the data is tokenized: cutoff_len 4096, the data's rows are far shorter, and the
    decision (printed, and saved in the run's config) names the longest row rounded up to pad_to_multiple_of."""
    import yaml

    from tests.helpers import alpaca_records, base_config, write_dataset
    from tunekit.data.lengths import measure_lengths
    from tunekit.flow import run_train
    from tunekit.model.loader import load_tokenizer

    write_dataset(tmp_path / "data", "toy", alpaca_records(6))
    options = base_config(tiny_qwen, tmp_path / "data", tmp_path / "out", cutoff_len=4096, max_steps=1, use_cpu=True)
    cfg = load_config(None, options)
    longest = max(measure_lengths(cfg, load_tokenizer(cfg))["total_len"])
    expected = -(-longest // cfg.pad_to_multiple_of) * cfg.pad_to_multiple_of
    assert expected < 100
    run_train(cfg)
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("gradient checkpointing:")]
    assert len(said) == 1 and said[0].startswith("gradient checkpointing: off (auto:")
    assert said[0].endswith(f"planned at {expected} tokens per row, from measured (longest row, padded))")
    saved = yaml.safe_load((tmp_path / "out" / "tunekit_config.yaml").read_text())
    assert saved["gradient_checkpointing"] is False


def test_plan_of_a_cpu_run_decides_for_this_host_s_ram(tiny_qwen):
    """``tunekit plan`` of a ``use_cpu`` config takes the decision ``tunekit train`` takes (the host's RAM), not
    "planned on, give --gpu"; its time section says no wall time is estimated for a CPU run."""
    cfg = load_config(None, {"model_name_or_path": str(tiny_qwen), "cutoff_len": 512, "use_cpu": True})
    plan = make_plan(cfg, num_samples=10)
    _, decision = resolve_gradient_checkpointing(cfg)
    assert plan.setup["gradient_checkpointing"] is False and decision.enabled is False
    assert decision.message() in plan.notes
    assert not any("give --gpu" in n for n in plan.notes)
    assert plan.time["assumptions"].endswith(
        "a CPU run: no wall time is estimated (benchmarks/real_shape.py measures one)"
    )
    assert "seconds" not in plan.time


def test_a_hub_model_is_planned_from_the_config_training_fetches(tmp_path):
    """A hub id that is not a built-in architecture: the plan reads the config.json tunekit train fetches next (here
    from ``cache_dir``, offline, in a fresh process: the hub's offline switch is read at import)."""
    import json
    import os
    import subprocess
    import sys

    repo = tmp_path / "cache" / "models--someorg--tiny-thing"
    snapshot = repo / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    (snapshot / "config.json").write_text(
        json.dumps(
            dict(
                model_type="qwen2",
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                vocab_size=384,
            )
        )
    )
    code = (
        "from tunekit.config import load_config\n"
        "from tunekit.plan.checkpointing import resolve_gradient_checkpointing\n"
        "cfg = load_config(None, dict(model_name_or_path='someorg/tiny-thing', "
        f"cache_dir={str(tmp_path / 'cache')!r}, "
        "use_cpu=True, cutoff_len=64))\n"
        "print(resolve_gradient_checkpointing(cfg)[1].message())\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "(auto: without it this run needs" in out.stdout.strip().splitlines()[-1]  # planned from the hub config
