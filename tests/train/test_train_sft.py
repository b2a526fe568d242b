"""SFT end to end on a tiny model: learning happens for every method, outputs reload in plain
transformers/peft, gradient accumulation and resume are exact."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from tests.helpers import TUTORIAL_FLAGS, alpaca_records, base_config, log_rows, logged_losses, write_dataset
from tests.tolerances import FLOAT64_WEIGHT_TOL, loss_tolerance
from tunekit.config import load_config
from tunekit.errors import ConfigError
from tunekit.flow import run_train  # the one train flow (auto_fit, gradient_checkpointing: auto decided)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sftdata")
    write_dataset(folder, "toy", alpaca_records(16, seed=1))
    return folder


def _train(model, data_dir, out, **overrides):
    cfg = load_config(None, base_config(model, data_dir, out, **overrides))
    return run_train(cfg)


@pytest.mark.parametrize(
    "method, extra",
    [
        ("lora", {"learning_rate": 5e-3}),
        ("lora", {"learning_rate": 5e-3, "use_dora": True}),
        ("lora", {"learning_rate": 1e-2, "use_rslora": True, "lora_target": "q_proj,v_proj"}),
        ("freeze", {"learning_rate": 3e-3, "freeze_trainable_layers": 1}),
        ("full", {"learning_rate": 3e-3}),
    ],
)
def test_loss_decreases(tiny_qwen, data_dir, tmp_path, method, extra):
    out = tmp_path / "out"
    results = _train(tiny_qwen, data_dir, out, finetuning_type=method, max_steps=12, **extra)
    losses = logged_losses(out)
    assert len(losses) == 12
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.2, losses
    assert results["total_steps"] == 12 and results["num_input_tokens_seen"] > 0
    all_results = json.loads((out / "all_results.json").read_text())
    assert {"train_runtime", "train_tokens_per_second", "peak_rss_mb", "train_loss"} <= set(all_results)
    row = log_rows(out)[0]
    assert {
        "step",
        "loss",
        "lr",
        "grad_norm",
        "epoch",
        "num_input_tokens_seen",
        "elapsed_s",
        "eta_s",
        "total_steps",
    } <= set(row)
    assert (out / "tunekit_config.yaml").is_file() and (out / "tokenizer.json").is_file()
    if method == "lora":
        assert (out / "adapter_model.safetensors").is_file() and (out / "adapter_config.json").is_file()
    else:
        assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()


def test_freeze_trains_only_the_last_layers(tiny_qwen, data_dir, tmp_path):
    from safetensors.torch import load_file

    out = tmp_path / "out"
    _train(
        tiny_qwen, data_dir, out, finetuning_type="freeze", freeze_trainable_layers=1, max_steps=2, learning_rate=1e-2
    )
    before, after = load_file(tiny_qwen / "model.safetensors"), load_file(out / "model.safetensors")
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("model.layers.1.") for k in changed), sorted(changed)


def test_lora_adapter_reloads_in_plain_peft_with_same_logits(tiny_qwen, data_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tunekit.model.loader import load_model, load_tokenizer

    out = tmp_path / "out"
    _train(tiny_qwen, data_dir, out, max_steps=4, learning_rate=1e-2, plot_loss=True)
    assert (out / "training_loss.png").stat().st_size > 1000
    # float64 on both sides: tunekit may merge the adapter for inference (W + s*BA, then one matmul) where plain peft
    # adds the two products, and only the rounding of those differs: relative ~2 * 64 * 2**-53 per matmul of width 64,
    # so ~1e-13 on logits below 10 after 2 layers. 1e-10 keeps a thousandfold margin and is seven orders below the
    # guarded effect (a wrong or missing adapter moves the logits by > 1e-3, asserted below).
    base = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float64)
    plain = PeftModel.from_pretrained(base, out).eval()
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(tiny_qwen),
            "adapter_name_or_path": str(out),
            "template": "qwen",
            "dtype": "float64",
        },
    )
    ours = load_model(cfg, load_tokenizer(cfg), is_trainable=False)
    ids = torch.tensor([[5, 17, 99, 23, 42, 7, 64, 3]])
    with torch.no_grad():
        a, b = plain(ids).logits, ours(ids).logits
        c = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float64)(ids).logits
    assert a.dtype == b.dtype == torch.float64
    assert torch.allclose(a, b, atol=1e-10, rtol=0), (a - b).abs().max()
    assert (a - c).abs().max() > 1e-3  # the adapter changed something


def test_full_model_reloads_with_plain_transformers(tiny_qwen, data_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "out"
    _train(tiny_qwen, data_dir, out, finetuning_type="full", max_steps=2, learning_rate=1e-3)
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is 1 plus 1?"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt.endswith("<|im_start|>assistant\n")
    assert model(**tok(prompt, return_tensors="pt")).logits.shape[-1] == model.config.vocab_size


def test_gradient_accumulation_equivalence(tiny_qwen, data_dir, tmp_path):
    """batch 1 x accumulation 4 == batch 4 x accumulation 1 (same samples per step, token-averaged loss)."""
    a, b = tmp_path / "a", tmp_path / "b"
    # float64 weights: in float32, Adam turns reduction-order differences of gradients at the rounding floor into
    # steps of up to lr (tests/tolerances.py), so later losses would depend on the machine's kernels.
    common = dict(
        finetuning_type="full", max_steps=4, learning_rate=1e-3, gradient_checkpointing=False, dtype="float64"
    )
    _train(tiny_qwen, data_dir, a, per_device_train_batch_size=1, gradient_accumulation_steps=4, **common)
    _train(tiny_qwen, data_dir, b, per_device_train_batch_size=4, gradient_accumulation_steps=1, **common)
    la, lb = logged_losses(a), logged_losses(b)
    assert len(la) == len(lb) == 4
    wa, wb = _weights(a), _weights(b)
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) <= FLOAT64_WEIGHT_TOL
    # The logged loss still goes through float32 (the loss upcast and the Trainer's accumulator): at most 4 x cutoff 64
    # = 256 token terms of ~|y| nats per step, summed in two orders. A wrong accumulation (mean of means instead of
    # the token average) moves it by ~1e-1.
    for x, y in zip(la, lb):
        assert abs(x - y) <= loss_tolerance(256, y), (la, lb)


def _weights(path: Path) -> dict:
    from safetensors.torch import load_file

    name = "adapter_model.safetensors" if (path / "adapter_model.safetensors").is_file() else "model.safetensors"
    return load_file(path / name)


@pytest.mark.parametrize("method", ["lora", "full"])
def test_resume_matches_uninterrupted_run(tiny_qwen, data_dir, tmp_path, method):
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    common = dict(
        finetuning_type=method,
        max_steps=8,
        save_strategy="steps",
        save_steps=3,
        per_device_train_batch_size=3,
        learning_rate=5e-3,
        lr_scheduler_type="cosine",
        warmup_steps=2,
    )
    _train(tiny_qwen, data_dir, full, **common)
    # the run "died" after its checkpoint at step 3: only that checkpoint survives
    resumed.mkdir()
    shutil.copytree(full / "checkpoint-3", resumed / "checkpoint-3")
    _train(tiny_qwen, data_dir, resumed, resume_from_checkpoint=True, **common)
    assert [r["step"] for r in log_rows(resumed) if "loss" in r] == [4, 5, 6, 7, 8]
    # Both runs execute the same operations in the same order on one machine (the resumed one restores weights,
    # optimizer, scheduler and RNG states bit for bit), so no cross-machine rounding enters: they agree to the last
    # bit in practice; 1e-6 is far below what a replayed or skipped batch does (a step of ~lr = 5e-3).
    assert logged_losses(resumed) == pytest.approx(logged_losses(full)[3:], abs=1e-6)
    wa, wb = _weights(full), _weights(resumed)
    assert wa.keys() == wb.keys()
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-6


def test_resume_skips_a_torn_checkpoint(tiny_qwen, data_dir, tmp_path):
    out = tmp_path / "out"
    _train(tiny_qwen, data_dir, out, max_steps=4, save_strategy="steps", save_steps=2)
    (out / "checkpoint-4" / "tunekit_complete.json").unlink()  # killed while saving checkpoint-4
    from tunekit.train.resume import plan_resume

    assert plan_resume(out, True, check_finished=False).checkpoint.endswith("checkpoint-2")
    with pytest.raises(ConfigError, match="checkpoint-4 is incomplete"):
        plan_resume(out, str(out / "checkpoint-4"), check_finished=False)


def test_refuses_non_empty_output_dir(tiny_qwen, data_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(
        ConfigError, match=r"output_dir .*out is not empty \(precious\.txt\)\. Set overwrite_output_dir: true"
    ):
        _train(tiny_qwen, data_dir, out)
    assert (out / "precious.txt").read_text() == "keep me"


def test_missing_tracker_fails_before_training(tiny_qwen, data_dir, tmp_path):
    from tunekit.errors import EnvironmentProblem

    with pytest.raises(EnvironmentProblem, match="report_to includes wandb but the wandb package is not installed"):
        _train(tiny_qwen, data_dir, tmp_path / "o", report_to="wandb")
    assert not (tmp_path / "o" / "trainer_log.jsonl").exists()


def test_sigterm_saves_a_checkpoint_and_resume_continues(tiny_qwen, data_dir, tmp_path):
    out = tmp_path / "out"
    cfg = base_config(
        tiny_qwen, data_dir, out, max_steps=400, save_strategy="steps", save_steps=1000, learning_rate=1e-4
    )
    args = [f"{k}={v}" for k, v in cfg.items()]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tunekit.cli.main", "train", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log = out / "trainer_log.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (log.is_file() and log.read_text().count("\n") >= 2):
        time.sleep(0.2)
    proc.terminate()
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 143, output
    ckpts = sorted(out.glob("checkpoint-*"))
    assert len(ckpts) == 1 and (ckpts[0] / "tunekit_complete.json").is_file(), output
    step = int(ckpts[0].name.split("-")[1])
    assert 2 <= step < 400 and "received SIGTERM" in output


def test_cli_train_user_error_has_no_traceback(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tunekit.cli.main",
            "train",
            "model_name_or_path=/nonexistent/model",
            "template=qwen",
            "dataset=x",
            f"output_dir={tmp_path / 'o'}",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == "error: Model folder /nonexistent/model does not exist (model_name_or_path). Check the path, or use a hub "
        "id like Qwen/Qwen2.5-0.5B."
    )


def test_swanlab_local_mode_works_offline(tiny_qwen, data_dir, tmp_path):
    out = tmp_path / "out"
    _train(tiny_qwen, data_dir, out, max_steps=2, use_swanlab=True, swanlab_mode="local")
    runs = list((out / "swanlog").glob("run-*"))
    assert len(runs) == 1


def test_swanlab_cloud_without_network_fails_before_training(tiny_qwen, data_dir, tmp_path, monkeypatch):
    from tunekit.errors import EnvironmentProblem
    from tunekit.train import trackers

    monkeypatch.setattr(trackers, "_reachable", lambda host, timeout=3.0: False)  # this machine has no network anyway
    with pytest.raises(EnvironmentProblem, match="swanlab_mode: cloud needs network access to api.swanlab.cn"):
        _train(tiny_qwen, data_dir, tmp_path / "o", use_swanlab=True, swanlab_mode="cloud")


@pytest.mark.slow
def test_tutorial_command_runs_as_written(tiny_qwen, data_dir, tmp_path):
    """The seed tutorial's llamafactory-cli flags, with program, model, dataset swapped (SwanLab
    local: no network here)."""
    flags = list(TUTORIAL_FLAGS)
    swap = {
        "--model_name_or_path": str(tiny_qwen),
        "--dataset_dir": str(data_dir),
        "--dataset": "toy",
        "--output_dir": str(tmp_path / "out"),
        "--swanlab_mode": "local",
    }
    for key, value in swap.items():
        flags[flags.index(key) + 1] = value
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tunekit.cli.main",
            "train",
            *flags,
            "--max_steps",
            "2",
            "--cutoff_len",
            "256",
            "--logging_steps",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "out"
    assert (out / "adapter_model.safetensors").is_file() and (out / "training_loss.png").is_file()
    assert (out / "swanlog").is_dir()
    # gradient_checkpointing: auto (the default) is decided from the memory plan, printed and saved with the run
    assert "gradient checkpointing: off (auto: without it this run needs" in proc.stdout, proc.stdout[-3000:]
    assert yaml.safe_load((out / "tunekit_config.yaml").read_text())["gradient_checkpointing"] is False


def test_final_evaluation_is_the_last_step_evaluation_of_the_saved_weights(tiny_qwen, data_dir, tmp_path):
    """HF evaluates at the last step; do_eval's evaluation after training reuses it instead of a second pass,
    and its numbers are those of the saved model evaluated afresh."""
    out = tmp_path / "out"
    results = _train(
        tiny_qwen,
        data_dir,
        out,
        finetuning_type="full",
        learning_rate=3e-3,
        val_size=4,
        eval_strategy="steps",
        eval_steps=2,
        max_steps=3,
        do_train=True,
        do_eval=True,
    )
    evals = [row for row in log_rows(out) if "eval_loss" in row]
    assert [row["step"] for row in evals] == [2, 3]
    eval_results = json.loads((out / "eval_results.json").read_text())
    assert results["eval_loss"] == eval_results["eval_loss"] == evals[-1]["eval_loss"]
    assert {"eval_runtime", "eval_samples_per_second", "epoch"} <= set(eval_results)

    fresh = _train(out, data_dir, tmp_path / "fresh", do_train=False, do_eval=True, val_size=4)
    # same saved weights, same evaluation batches, same machine: the same operations, so equal up to the float32
    # round trip of the saved weights (none: they are float32 throughout); 1e-6 is below any real difference in data.
    assert abs(fresh["eval_loss"] - results["eval_loss"]) < 1e-6, (fresh["eval_loss"], results["eval_loss"])


def test_final_evaluation_runs_again_when_the_weights_changed():
    from types import SimpleNamespace

    from tunekit.train.run import evaluation_of_final_weights

    state = SimpleNamespace(
        global_step=4, log_history=[{"step": 4, "loss": 1.0}, {"step": 4, "eval_loss": 2.0, "epoch": 1.0}]
    )
    trainer = SimpleNamespace(state=state)
    cfg = SimpleNamespace(do_train=True, load_best_model_at_end=False)
    assert evaluation_of_final_weights(trainer, cfg) == {"eval_loss": 2.0, "epoch": 1.0}
    assert evaluation_of_final_weights(trainer, SimpleNamespace(do_train=True, load_best_model_at_end=True)) is None
    assert evaluation_of_final_weights(trainer, SimpleNamespace(do_train=False, load_best_model_at_end=False)) is None
    state.log_history = [{"step": 2, "eval_loss": 2.5}, {"step": 4, "loss": 1.0}]  # no evaluation at the last step
    assert evaluation_of_final_weights(trainer, cfg) is None
