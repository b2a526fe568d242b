"""Issue 14 §4, after training: nothing quietly different.

Quantized export never substitutes a method (a calibration dataset means GPTQ, as in LLaMA-Factory), `tunekit verify`
finds the recorded base/adapters from any folder and never calls a skipped check OK, pre-quantized GPTQ/AWQ/AQLM bases
are refused naming the package, a predict-only LLaMA-Factory config runs only prediction, PiSSA adapters are converted
to plain LoRA on the original base, and the loss plot's smoothed line follows a falling loss.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from helpers import alpaca_records, base_config, write_dataset
from tunekit.config import load_config
from tunekit.errors import ConfigError, EnvironmentProblem, ModelError


# ------------------------------------------------------------------------------------------------ loss plot
def _quickstart_like_loss(n: int = 120) -> list[float]:
    """A falling loss like the quickstart's: 10 at the start, about 2 after step 30, with deterministic noise."""
    return [8.0 * math.exp(-step / 8) + 2.0 + 0.15 * math.sin(1.7 * step) for step in range(1, n + 1)]


def test_smoothed_line_of_a_falling_loss_stays_within_the_raw_points_near_it():
    from tunekit.train.plotting import half_window, smooth

    raw = _quickstart_like_loss()
    k = half_window(len(raw))
    assert k == 6
    smoothed = smooth(raw, k)
    for i, value in enumerate(smoothed):
        near = raw[max(0, i - k): i + k + 1]
        assert min(near) <= value <= max(near), (i, raw[i], value)
    # the defect: the old trailing EMA (started at the first value) drew 4.7 where the raw loss was 2.3
    assert abs(smoothed[29] - raw[29]) < 0.2
    # exact values: a linear trend is reproduced without lag, a zig-zag is averaged with triangle weights
    assert smooth([1.0, 2.0, 3.0, 4.0, 5.0], 1) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert smooth([0.0, 3.0, 0.0, 3.0, 0.0], 1) == [0.0, 1.5, 1.5, 1.5, 0.0]
    assert smooth([4.0], 3) == [4.0] and smooth([], 3) == []


def test_loss_plot_is_written_with_a_log_axis_when_the_loss_spans_a_decade(tmp_path):
    from tunekit.train.plotting import loss_figure, loss_points, plot_loss, read_log

    rows = [{"step": s, "loss": 40.0 * math.exp(-s / 10) + 0.5} for s in range(1, 61)]
    rows.insert(10, {"step": 5, "loss": 99.0})  # a resumed run logs step 5 again: the last value counts
    rows.append({"step": 61, "loss": float("nan")})  # not drawable: left out
    rows += [{"step": s, "eval_loss": 3.0 - 0.01 * s} for s in (20, 40, 60)]
    (tmp_path / "trainer_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 62, "lo', encoding="utf-8")
    steps, values = loss_points(read_log(tmp_path), "loss")
    assert steps == list(range(1, 61)) and values[4] == 99.0
    assert loss_figure(steps, values, "loss", "run").axes[0].get_yscale() == "log"  # 40.5 .. 0.6: two decades
    eval_steps, eval_values = loss_points(read_log(tmp_path), "eval_loss")
    assert eval_steps == [20, 40, 60] and loss_figure(eval_steps, eval_values, "eval_loss", "run").axes[0].get_yscale() == "linear"
    written = plot_loss(tmp_path)
    assert [p.name for p in written] == ["training_loss.png", "training_eval_loss.png"]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


# ------------------------------------------------------------------------------------------------ quantized export
def test_llamafactory_quantized_export_config_means_gptq_and_is_refused_before_writing(tiny_qwen, tmp_path):
    """export_quantization_bit + export_quantization_dataset (LLaMA-Factory's GPTQ export) never becomes bitsandbytes."""
    import importlib.util

    from tunekit.export import export_model
    from tunekit.export.quantize import quantization_method

    if importlib.util.find_spec("gptqmodel") and importlib.util.find_spec("optimum"):
        pytest.skip("gptqmodel and optimum are installed: the refusal is not what runs here")
    write_dataset(tmp_path / "data", "calib", alpaca_records(8))
    out = tmp_path / "exports" / "q4"
    lf = dict(model_name_or_path=str(tiny_qwen), template="qwen", export_dir=str(out), export_quantization_bit=4,
              export_quantization_dataset="calib", dataset_dir=str(tmp_path / "data"))
    cfg = load_config(None, lf)
    assert quantization_method(cfg) == "gptq"
    with pytest.raises(EnvironmentProblem) as err:
        export_model(cfg)
    message = str(err.value)
    assert message.startswith("export_quantization_bit 4 with export_quantization_dataset calib means GPTQ (as in LLaMA-Factory)")
    assert "needs the gptqmodel package (with optimum; missing here: gptqmodel, optimum)" in message
    assert "Nothing was written" in message and "export_quantization_method: bnb" in message
    assert not (tmp_path / "exports").exists()  # not even the parent folder
    # bnb is chosen only explicitly or without calibration data; bnb with calibration data is a contradiction
    assert quantization_method(load_config(None, {**lf, "export_quantization_dataset": None})) == "bnb"
    with pytest.raises(ConfigError, match="export_quantization_dataset is GPTQ's calibration data, but export_quantization_method is bnb"):
        load_config(None, {**lf, "export_quantization_method": "bnb"})


# ------------------------------------------------------------------------------------------------ verify
@pytest.fixture(scope="module")
def lora_adapter(tiny_qwen, tmp_path_factory) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float32)
    out = tmp_path_factory.mktemp("lora") / "adapter"
    get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)).save_pretrained(out)
    return out


def test_verify_finds_relative_base_and_adapter_from_another_folder(tiny_qwen, lora_adapter, tmp_path, monkeypatch, capsys):
    """The defect: the base was recorded as a relative path; verify run elsewhere skipped the logits check and said OK."""
    from tunekit.cli.main import main

    project = tmp_path / "project"
    shutil.copytree(tiny_qwen, project / "base")
    shutil.copytree(lora_adapter, project / "saves" / "lora")
    monkeypatch.chdir(project)
    assert main(["export", "model_name_or_path=base", "adapter_name_or_path=saves/lora", "template=qwen",
                 "export_dir=out/merged", "--no-verify"]) == 0
    provenance = json.loads((project / "out" / "merged" / "tunekit_export.json").read_text())
    assert provenance["base"] == str((project / "base").resolve())
    assert provenance["adapters"] == [str((project / "saves" / "lora").resolve())]
    assert provenance["base_relative_to_export"] == "../../base"
    assert provenance["adapters_relative_to_export"] == ["../../saves/lora"]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert main(["verify", str(project / "out" / "merged"), "--strict"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"verify {project / 'out' / 'merged'}: OK\n")
    assert "max |merged - (base + adapter)|" in printed and "skipped" not in printed

    # the whole tree moved: the paths relative to the export still find base and adapter
    moved = tmp_path / "moved"
    shutil.move(str(project), str(moved))
    from tunekit.export.verify import verify_export

    report = verify_export(moved / "out" / "merged")
    assert report["ok"] and not report.get("skipped") and report["max_abs_logit_diff"] < 1e-4, report["checks"]

    # an export written before paths were made absolute, whose sources are gone: "skipped: reason", never OK
    merged = moved / "out" / "merged"
    old = {k: v for k, v in provenance.items() if not k.endswith("_relative_to_export") and k != "written_from"}
    (merged / "tunekit_export.json").write_text(json.dumps({**old, "base": "base", "adapters": ["saves/lora"]}))
    shutil.rmtree(moved / "base")
    capsys.readouterr()
    assert main(["verify", str(merged)]) == 0  # nothing wrong was found ...
    printed = capsys.readouterr().out
    assert printed.startswith(f"verify {merged}: no problems found, but 1 check skipped (merged_logits): not verified\n")
    assert ("  merged_logits  skipped: the base model base recorded in tunekit_export.json is not a local folder here "
            f"(looked next to {merged} and in {elsewhere}) nor a hub model in the local cache") in printed
    assert "OK" not in printed
    assert main(["verify", str(merged), "--strict"]) == 1  # ... and --strict fails on what was not checked


# ------------------------------------------------------------------------------------------------ pre-quantized bases
PREQUANTIZED_CONFIGS = {
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True},
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
    "aqlm": {"quant_method": "aqlm", "in_group_size": 8, "out_group_size": 1, "num_codebooks": 1, "nbits_per_codebook": 16},
}


@pytest.mark.parametrize("method", sorted(PREQUANTIZED_CONFIGS))
def test_prequantized_base_is_refused_naming_the_package(method, tiny_qwen, tmp_path):
    """LLaMA-Factory's train_qlora examples on GPTQ/AWQ/AQLM bases ended in transformers' ImportError traceback."""
    import importlib.util

    from tunekit.model.loader import PREQUANTIZED, load_model, load_tokenizer

    packages = PREQUANTIZED[method][0]
    if all(importlib.util.find_spec(p) for p in packages):
        pytest.skip(f"{', '.join(packages)} installed: the model would load")
    folder = tmp_path / f"tiny-{method}"
    shutil.copytree(tiny_qwen, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "quantization_config": PREQUANTIZED_CONFIGS[method]}))
    cfg = load_config(None, dict(model_name_or_path=str(folder), template="qwen", finetuning_type="lora"))
    with pytest.raises(EnvironmentProblem) as err:
        load_model(cfg, load_tokenizer(cfg))
    message = str(err.value)
    assert message.startswith(f"{folder} is a pre-quantized {method.upper()} model (quantization_config in config.json); "
                              f"loading it needs {' and '.join(packages)} (missing: ")
    assert PREQUANTIZED[method][1] in message and "quantization_bit: 4 (bitsandbytes QLoRA, runs on CPU)" in message
    if method == "gptq":
        assert message == (
            f"{folder} is a pre-quantized GPTQ model (quantization_config in config.json); loading it needs gptqmodel and "
            f"optimum (missing: gptqmodel, optimum): pip install gptqmodel optimum; gptqmodel has CPU kernels, but no "
            f"gptqmodel release installs next to tunekit's pins (torch 2.13.0, protobuf 6.33.6, numpy 2.4.6): use an "
            f"environment built for it, usually on an NVIDIA GPU. Or train on the unquantized model with "
            f"quantization_bit: 4 (bitsandbytes QLoRA, runs on CPU).")
    if method == "aqlm":
        assert "pip install 'aqlm[cpu]' (or 'aqlm[gpu]' on an NVIDIA GPU); aqlm runs on CPU through numba kernels" in message
    with pytest.raises(ConfigError, match=f"is already quantized \\({method}\\): remove quantization_bit"):
        load_model(cfg.model_copy(update={"quantization_bit": 4}), load_tokenizer(cfg))
    with pytest.raises(ConfigError, match="its quantized weights cannot be trained directly; set finetuning_type: lora"):
        load_model(load_config(None, dict(model_name_or_path=str(folder), template="qwen", finetuning_type="full")), load_tokenizer(cfg))
