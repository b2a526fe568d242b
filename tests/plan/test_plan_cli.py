"""`tunekit plan`: the JSON interface, auto-fit, apply_auto_fit, and the error messages."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tunekit.cli.main import main
from tunekit.config import load_config
from tunekit.errors import ConfigError
from tunekit.plan import apply_auto_fit, make_plan
from tunekit.plan.gpus import GPU


@pytest.fixture
def qwen7b_yaml(tmp_path):
    path = tmp_path / "lora.yaml"
    path.write_text(
        "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nfinetuning_type: lora\nlora_rank: 8\nbf16: true\n"
        "per_device_train_batch_size: 1\ngradient_accumulation_steps: 8\nnum_train_epochs: 3\n"
        "val_size: 0.15\ncutoff_len: 2048\nflash_attn: fa2\n"
    )
    return path


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_plan_json_interface(qwen7b_yaml, capsys):
    # checkpointing forced on (auto would turn it off on an 80 GiB H100:
    # ~34 GiB without it, see test_plan_checkpointing.py)
    rc, out, _ = _run(
        capsys,
        "plan",
        str(qwen7b_yaml),
        "gradient_checkpointing=true",
        "--num-samples",
        "2876",
        "--gpus",
        "2",
        "--gpu",
        "H100",
        "--json",
    )
    assert rc == 0
    plan = json.loads(out)
    assert (plan["train_samples"], plan["eval_samples"], plan["effective_batch_size"]) == (2445, 431, 16)
    assert (plan["steps_per_epoch"], plan["total_steps"], plan["steps_per_epoch_floor_rounding"]) == (153, 459, 152)
    mem = plan["memory"]
    assert set(mem) >= {
        "total_gib",
        "base_weights",
        "trainable_params",
        "gradients",
        "optimizer_states",
        "activations",
        "logits",
    }
    parts = sum(v for k, v in mem.items() if k != "total_gib")  # the components add up to the peak
    assert mem["total_gib"] == pytest.approx(parts, abs=0.01)
    # 17.3 GiB: the head + loss run in chunks (chunked_lm_loss, the default; ~20.5 GiB with the whole logits)
    assert 15 < mem["total_gib"] < 19 and plan["fits"] is True
    assert "overrides" not in plan and any("456" in n for n in plan["notes"])


def test_plan_human_output_and_overrides(qwen7b_yaml, capsys):
    rc, out, _ = _run(
        capsys,
        "plan",
        str(qwen7b_yaml),
        "per_device_train_batch_size=2",
        "gradient_accumulation_steps=4",
        "--num-samples",
        "1000",
        "--gpu-memory",
        "24",
        "--auto-fit",
    )
    assert rc == 0
    assert "Memory per device" in out and "LM head + loss" in out and "pass to tunekit train:" in out
    plan = make_plan(
        load_config(qwen7b_yaml, ["per_device_train_batch_size=2", "gradient_accumulation_steps=4"]),
        gpu_memory_gib=24,
        num_samples=1000,
        auto_fit=True,
    )
    over = plan.overrides
    assert over["per_device_train_batch_size"] * over["gradient_accumulation_steps"] == 8  # effective batch kept
    assert plan.fit["fits"] and plan.fit["total_gib"] <= 24 * 0.95
    # the overrides are valid tunekit options
    fitted = load_config(qwen7b_yaml, [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in over.items()])
    assert fitted.per_device_train_batch_size == over["per_device_train_batch_size"]


def test_nothing_fits_says_what_is_missing(qwen7b_yaml):
    cfg = load_config(qwen7b_yaml)
    plan = make_plan(cfg, gpu_memory_gib=3, num_samples=100, auto_fit=True)  # even ZeRO-3 with offload needs more
    assert plan.fit["fits"] is False and plan.fit["missing_gib"] > 0
    assert any("Nothing fits" in n and "GiB more" in n for n in plan.notes)
    with pytest.raises(ConfigError, match="nothing fits"):
        apply_auto_fit(cfg, gpu=GPU("3 GiB", 3.0, 0.0), world_size=1)


def test_apply_auto_fit_returns_config(qwen7b_yaml):
    plain = ["chunked_lm_loss=false"]  # whole logits: what bounds the micro-batch here
    cfg = load_config(
        qwen7b_yaml, ["per_device_train_batch_size=4", "gradient_accumulation_steps=2", "auto_fit=true", *plain]
    )
    fitted = apply_auto_fit(cfg, gpu=GPU("A100-80GB", 80.0, 312.0), world_size=1)
    assert fitted.per_device_train_batch_size * fitted.gradient_accumulation_steps == 8
    # fastest first: recomputation off, with the largest micro-batch that then fits (2 x 2048 tokens of 152K logits)
    assert fitted.use_gradient_checkpointing is False and fitted.per_device_train_batch_size == 2
    assert make_plan(fitted, gpu="A100-80GB", num_samples=8).fits
    bigger = load_config(
        qwen7b_yaml,
        ["per_device_train_batch_size=4", "gradient_accumulation_steps=2", "gradient_checkpointing=false", *plain],
    )
    assert not make_plan(bigger, gpu="A100-80GB", num_samples=8).fits
    # the chunked head + loss (the default) holds one chunk of logits:
    # the whole micro-batch of 4 fits without recompute
    chunked = apply_auto_fit(
        load_config(qwen7b_yaml, ["per_device_train_batch_size=4", "gradient_accumulation_steps=2", "auto_fit=true"]),
        gpu=GPU("A100-80GB", 80.0, 312.0),
        world_size=1,
    )
    assert chunked.use_gradient_checkpointing is False and chunked.per_device_train_batch_size == 4
    assert fitted.model_name_or_path == cfg.model_name_or_path


def test_model_config_path_and_builtin(tmp_path, capsys):
    from transformers import LlamaConfig

    folder = tmp_path / "m"
    LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=100
    ).save_pretrained(folder)
    cfg = load_config(None, {"finetuning_type": "full", "cutoff_len": 64})
    a = make_plan(cfg, model_config=str(folder / "config.json"), num_samples=10)
    b = make_plan(cfg, model_config=str(folder), num_samples=10)
    assert a.memory == b.memory and a.params["trainable"] == a.model["total_params"]
    c = make_plan(load_config(None, {"model_name_or_path": "meta-llama/Llama-3.1-8B-Instruct"}), num_samples=10)
    assert c.model["total_params"] == 8_030_261_248


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--gpu", "Z100"], "Unknown GPU 'Z100'. Known GPUs: B200, H200, H100-SXM"),
        (["per_device_train_batch_size=0"], "per_device_train_batch_size"),
        (["--gpus", "0"], "--gpus must be a whole number >= 1"),
        (["--model-config", "qwen9-1b"], "Built-in: deepseek-v2, deepseek-v2-lite, deepseek-v3, gemma-2-2b"),
        (["deepspeed=z3", "--gpus", "8", "finetuning_type=lora", "lora_rank=1", "lora_target=q_proj"], "ZeRO-3"),
    ],
)
def test_errors(tmp_path, capsys, argv, message):
    from transformers import LlamaConfig

    folder = tmp_path / "tiny"
    LlamaConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=64
    ).save_pretrained(folder)
    rc, _, err = _run(capsys, "plan", f"model_name_or_path={folder}", "--num-samples", "10", *argv)
    assert rc == 2 and err.startswith("error: ") and message in err


def test_model_folder_without_config_json(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    rc, _, err = _run(capsys, "plan", f"model_name_or_path={tmp_path / 'empty'}", "--num-samples", "10")
    assert rc == 2 and "has no config.json" in err


def test_help_is_fast_and_does_not_import_torch():
    code = (
        "import sys; from tunekit.cli.main import main; main(['plan', '--help']); main(['data', '--help']); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "--auto-fit" in res.stdout and "recommended cutoff_len" in res.stdout


def test_cpu_plan_names_the_cpu_and_plans_float64(tmp_path, capsys):
    """A ``use_cpu`` run is described as one (engine "CPU", the heap's rows named as such, not CUDA's), and a float64
    run plans instead of failing on its 8-byte compute dtype (it raised KeyError: 8)."""
    path = tmp_path / "cpu.yaml"
    path.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\nfinetuning_type: lora\nuse_cpu: true\ndtype: float64\n"
        "per_device_train_batch_size: 2\ncutoff_len: 1024\n"
    )
    rc, out, _ = _run(capsys, "plan", str(path), "--num-samples", "100", "--model-config", "qwen2.5-0.5b", "--json")
    assert rc == 0
    plan = json.loads(out)
    assert plan["setup"]["engine"] == "CPU" and plan["setup"]["precision"] == "fp64" and plan["setup"]["host"] is True
    rc, out, _ = _run(capsys, "plan", str(path), "--num-samples", "100", "--model-config", "qwen2.5-0.5b")
    assert rc == 0 and "Heap fragmentation" in out and "CUDA context" not in out
