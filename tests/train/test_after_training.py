"""After training: nothing quietly different.

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

from tests.helpers import alpaca_records, base_config, write_dataset
from tunekit.config import load_config
from tunekit.errors import ConfigError, EnvironmentProblem


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
        near = raw[max(0, i - k) : i + k + 1]
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
    (tmp_path / "trainer_log.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows) + '{"step": 62, "lo', encoding="utf-8"
    )
    steps, values = loss_points(read_log(tmp_path), "loss")
    assert steps == list(range(1, 61)) and values[4] == 99.0
    assert loss_figure(steps, values, "loss", "run").axes[0].get_yscale() == "log"  # 40.5 .. 0.6: two decades
    eval_steps, eval_values = loss_points(read_log(tmp_path), "eval_loss")
    assert (
        eval_steps == [20, 40, 60]
        and loss_figure(eval_steps, eval_values, "eval_loss", "run").axes[0].get_yscale() == "linear"
    )
    written = plot_loss(tmp_path)
    assert [p.name for p in written] == ["training_loss.png", "training_eval_loss.png"]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


# ------------------------------------------------------------------------------------------------ quantized export
def test_llamafactory_quantized_export_config_means_gptq(tiny_qwen, tmp_path):
    """export_quantization_bit + export_quantization_dataset (LLaMA-Factory's GPTQ export) never becomes
    bitsandbytes (the GPTQ export itself: tests/export/test_gptq_export.py)."""
    from tunekit.export.quantize import quantization_method

    write_dataset(tmp_path / "data", "calib", alpaca_records(8))
    lf = dict(
        model_name_or_path=str(tiny_qwen),
        template="qwen",
        export_dir=str(tmp_path / "exports" / "q4"),
        export_quantization_bit=4,
        export_quantization_dataset="calib",
        dataset_dir=str(tmp_path / "data"),
    )
    assert quantization_method(load_config(None, lf)) == "gptq"
    assert quantization_method(load_config(None, {**lf, "export_quantization_dataset": None})) == "bnb"
    # bnb is chosen only explicitly or without calibration data; bnb with calibration data is a contradiction
    assert quantization_method(load_config(None, {**lf, "export_quantization_dataset": None})) == "bnb"
    with pytest.raises(
        ConfigError,
        match="export_quantization_dataset is GPTQ's calibration data, but export_quantization_method is bnb",
    ):
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
    get_peft_model(
        model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    ).save_pretrained(out)
    return out


def test_verify_finds_relative_base_and_adapter_from_another_folder(
    tiny_qwen, lora_adapter, tmp_path, monkeypatch, capsys
):
    """The defect: the base was recorded as a relative path; verify run elsewhere skipped the
    logits check and said OK."""
    from tunekit.cli.main import main

    project = tmp_path / "project"
    shutil.copytree(tiny_qwen, project / "base")
    shutil.copytree(lora_adapter, project / "saves" / "lora")
    monkeypatch.chdir(project)
    assert (
        main(
            [
                "export",
                "model_name_or_path=base",
                "adapter_name_or_path=saves/lora",
                "template=qwen",
                "export_dir=out/merged",
                "--no-verify",
            ]
        )
        == 0
    )
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
    assert printed.startswith(
        f"verify {merged}: no problems found, but 1 check skipped (merged_logits): not verified\n"
    )
    assert (
        "  merged_logits  skipped: the base model base recorded in tunekit_export.json is not a local folder here "
        f"(looked next to {merged} and in {elsewhere}) nor a hub model in the local cache"
    ) in printed
    assert "OK" not in printed
    assert main(["verify", str(merged), "--strict"]) == 1  # ... and --strict fails on what was not checked


# ------------------------------------------------------------------------------------------------ pre-quantized bases
PREQUANTIZED_CONFIGS = {
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True},
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
    "aqlm": {
        "quant_method": "aqlm",
        "in_group_size": 8,
        "out_group_size": 1,
        "num_codebooks": 1,
        "nbits_per_codebook": 16,
    },
}


@pytest.mark.parametrize("method", sorted(PREQUANTIZED_CONFIGS))
def test_prequantized_base_is_refused_naming_the_package(method, tiny_qwen, tmp_path):
    """LLaMA-Factory's train_qlora examples on GPTQ/AWQ/AQLM bases ended in transformers' ImportError traceback."""
    import importlib.util

    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.model.quantization import PREQUANTIZED

    packages = PREQUANTIZED[method][0]
    if all(importlib.util.find_spec(p) for p in packages):
        pytest.skip(f"{', '.join(packages)} installed: the model would load")
    folder = tmp_path / f"tiny-{method}"
    shutil.copytree(tiny_qwen, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "quantization_config": PREQUANTIZED_CONFIGS[method]}))
    cfg = load_config(None, dict(model_name_or_path=str(folder), template="qwen", finetuning_type="lora"))
    with pytest.raises(EnvironmentProblem) as err:
        load_model(cfg, load_tokenizer(cfg), is_trainable=method != "aqlm")  # AQLM: loading for inference
    message = str(err.value)
    assert message.startswith(
        f"{folder} is a pre-quantized {method.upper()} model (quantization_config in config.json); "
        f"loading it needs {' and '.join(packages)} (missing: "
    )
    assert PREQUANTIZED[method][1] in message and "quantization_bit: 4 (bitsandbytes QLoRA, runs on CPU)" in message
    if method == "gptq":
        assert message == (
            f"{folder} is a pre-quantized GPTQ model (quantization_config in config.json); loading it needs gptqmodel "
            "and "
            f"optimum (missing: gptqmodel, optimum): pip install gptqmodel optimum; gptqmodel has CPU kernels, but no "
            f"gptqmodel release installs next to tunekit's pins (torch 2.13.0, protobuf 6.33.6, numpy 2.4.6): use an "
            f"environment built for it, usually on an NVIDIA GPU. Or train on the unquantized model with "
            f"quantization_bit: 4 (bitsandbytes QLoRA, runs on CPU)."
        )
    if method == "aqlm":
        import torch

        if (
            not torch.cuda.is_available()
        ):  # training on CPU: measured to fail in peft's AQLM layer (aqlm 1.1.7 installed)
            with pytest.raises(EnvironmentProblem) as err:
                load_model(cfg, load_tokenizer(cfg))
            assert str(err.value) == (
                f"{folder} is a pre-quantized AQLM model: on CPU, aqlm 1.1.7 loads the model but peft 0.21's AQLM "
                "LoRA "
                "layer adds the adapter in place to aqlm's output ('Output 0 of _QuantizedMatmul is a view and is "
                "being "
                "modified inplace'), which autograd forbids, so QLoRA on an AQLM base does not train without CUDA. "
                "Train "
                "it on an NVIDIA GPU (pip install 'aqlm[gpu]'), or train on the unquantized model with "
                "quantization_bit: 4 "
                f"(bitsandbytes QLoRA, runs on CPU)."
            )
    with pytest.raises(ConfigError, match=f"is already quantized \\({method}\\): remove quantization_bit"):
        load_model(cfg.model_copy(update={"quantization_bit": 4}), load_tokenizer(cfg))
    with pytest.raises(
        ConfigError, match="its quantized weights cannot be trained directly; set finetuning_type: lora"
    ):
        load_model(
            load_config(None, dict(model_name_or_path=str(folder), template="qwen", finetuning_type="full")),
            load_tokenizer(cfg),
        )


# ------------------------------------------------------------------------------------------------ predict-only config
def test_llamafactory_predict_only_config_runs_only_prediction(tiny_qwen, lora_adapter, tmp_path, capsys):
    """LLaMA-Factory's examples/train_lora/llama3_lora_predict.yaml shape: do_predict + eval_dataset, no do_train and
    no dataset. It failed with "dataset is not set"; it must predict with base + adapter and train nothing."""
    from tunekit.flow import run_train
    from tunekit.infer.predict import run_predict

    qa = [{"instruction": f"What is {a} plus {a}?", "input": "", "output": str(2 * a)} for a in range(5)]
    write_dataset(tmp_path / "data", "qa", qa)
    predict_yaml = dict(  # the LLaMA-Factory example's keys
        model_name_or_path=str(tiny_qwen),
        adapter_name_or_path=str(lora_adapter),
        stage="sft",
        do_predict=True,
        finetuning_type="lora",
        eval_dataset="qa",
        dataset_dir=str(tmp_path / "data"),
        template="qwen",
        cutoff_len=64,
        max_samples=50,
        overwrite_cache=True,
        output_dir=str(tmp_path / "predict"),
        overwrite_output_dir=True,
        per_device_eval_batch_size=2,
        predict_with_generate=True,
        report_to="none",
        do_sample=False,
        max_new_tokens=4,
    )
    cfg = load_config(None, predict_yaml)
    assert cfg.do_train is False and cfg.do_predict is True
    assert load_config(None, {**predict_yaml, "do_train": True}).do_train is True  # given: kept
    assert load_config(None, {k: v for k, v in predict_yaml.items() if k != "do_predict"}).do_train is True

    results = run_train(cfg)
    out = tmp_path / "predict"
    assert results["predict_samples"] == 5 and "train_loss" not in results
    assert (
        "do_train is not set and do_predict is: only predicting (set do_train: true to train first)"
        in capsys.readouterr().out
    )
    assert not list(out.glob("checkpoint-*")) and not (out / "adapter_model.safetensors").exists()
    rows = [json.loads(line) for line in (out / "generated_predictions.jsonl").read_text().splitlines()]
    assert [r["label"] for r in rows] == ["0", "2", "4", "6", "8"]
    # the same predictions as `tunekit predict` with the same config (one generation path)
    run_predict(cfg.model_copy(update={"output_dir": str(tmp_path / "cli")}))
    cli_rows = [
        json.loads(line) for line in (tmp_path / "cli" / "generated_predictions.jsonl").read_text().splitlines()
    ]
    assert [r["predict"] for r in rows] == [r["predict"] for r in cli_rows]
    # do_eval alone: the evaluation loss of base + adapter on eval_dataset, nothing trained
    evaluated = run_train(
        load_config(
            None,
            {
                **{k: v for k, v in predict_yaml.items() if k != "do_predict"},
                "do_eval": True,
                "output_dir": str(tmp_path / "eval"),
            },
        )
    )
    assert math.isfinite(evaluated["eval_loss"]) and "train_loss" not in evaluated
    assert not (tmp_path / "eval" / "adapter_model.safetensors").exists()


# ------------------------------------------------------------------------------------------------ PiSSA -> LoRA
def fp32_logit_bound(model_config, logits) -> float:
    """How far two fp32 evaluations of the same function may differ in the logits.

    Both sides compute the same weights up to fp32 rounding: the trained PiSSA model holds W_res = fl(W - s B0 A0)
    (one rounding, at most u = 2**-24 relative per element) and computes W_res x + s B (A x); the converted adapter
    computes W x + s [B | -B0] ([A ; A0] x). A dot product over K terms rounds by at most K u relative to the sum of
    |terms| (Higham's gamma_K); each of the 7 linear maps of a decoder layer, and the LM head, adds one such error,
    and the RMS norms keep the activations' scale, so the logits move by at most
    (7 L + 1) K_max u max|logits|, with K_max the widest reduction (the MLP's intermediate size).
    """
    n_linear = 7 * model_config.num_hidden_layers + 1
    k_max = max(model_config.hidden_size, model_config.intermediate_size)
    return n_linear * k_max * 2.0**-24 * float(logits.abs().max())


def _pissa_cfg(tiny_qwen, **extra):
    return load_config(
        None,
        dict(
            model_name_or_path=str(tiny_qwen),
            template="qwen",
            finetuning_type="lora",
            lora_rank=4,
            lora_target="all",
            pissa_init=True,
            pissa_convert=True,
            dtype="float32",
            gradient_checkpointing=False,
            **extra,
        ),
    )


def test_pissa_adapter_converted_to_lora_reproduces_the_trained_model_on_the_original_base(tiny_qwen, tmp_path):
    """The defect: the saved PiSSA adapter on the original base (peft re-runs PiSSA's randomised SVD) lands far from
    the trained model. Converted (pissa_convert), it is a plain LoRA that reproduces the trained logits there."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tunekit.model.finetuning import save_pissa_converted
    from tunekit.model.loader import load_model, load_tokenizer

    torch.manual_seed(0)
    cfg = _pissa_cfg(tiny_qwen)  # pissa_iter 16: the randomised SVD, LLaMA-Factory's default
    model = load_model(cfg, load_tokenizer(cfg), is_trainable=True)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    batch = torch.randint(5, 200, (4, 12), generator=torch.Generator().manual_seed(1))
    for _ in range(4):  # real training steps move A and B away from their PiSSA initialisation
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    ids = torch.randint(5, 200, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        trained = model(input_ids=ids).logits
    save_pissa_converted(model, tmp_path / "converted")
    model.save_pretrained(tmp_path / "raw")  # what tunekit saved before: the PiSSA adapter as trained

    saved = json.loads((tmp_path / "converted" / "adapter_config.json").read_text())
    assert (saved["r"], saved["lora_alpha"], saved["init_lora_weights"]) == (
        8,
        16,
        True,
    )  # rank 2r, same scale alpha / r

    def on_original_base(adapter: Path):
        base = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float32)
        with torch.inference_mode():
            return PeftModel.from_pretrained(base, adapter).eval()(input_ids=ids).logits

    bound = fp32_logit_bound(model.config, trained)
    converted_diff = float((on_original_base(tmp_path / "converted") - trained).abs().max())
    raw_diff = float((on_original_base(tmp_path / "raw") - trained).abs().max())
    assert converted_diff <= bound, (converted_diff, bound)
    assert raw_diff > 100 * bound, (raw_diff, bound)  # the unconverted adapter is visibly wrong: the check can fail


def test_pissa_convert_in_a_training_run_saves_lora_for_the_original_base(tiny_qwen, tmp_path):
    """Through tunekit train: output_dir holds the converted adapter; its logits on the original base equal those of
    the run's last checkpoint (the PiSSA adapter on its residual base; pissa_iter -1, the exact SVD, rebuilds that
    residual from the original base the same way)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tunekit.flow import run_train

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(16))
    out = tmp_path / "run"
    cfg = load_config(
        None,
        base_config(
            tiny_qwen,
            data,
            out,
            finetuning_type="lora",
            lora_rank=4,
            pissa_init=True,
            pissa_iter=-1,
            pissa_convert=True,
            max_steps=3,
            learning_rate=1e-2,
            save_strategy="steps",
            save_steps=3,
            gradient_checkpointing=False,
        ),
    )
    run_train(cfg)
    saved = json.loads((out / "adapter_config.json").read_text())
    assert (saved["r"], saved["init_lora_weights"]) == (8, True)
    assert json.loads((out / "checkpoint-3" / "adapter_config.json").read_text())["init_lora_weights"] == "pissa"

    ids = torch.randint(5, 200, (2, 10), generator=torch.Generator().manual_seed(3))

    def logits(adapter: Path):
        base = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float32)
        with torch.inference_mode():
            peft = PeftModel.from_pretrained(base, adapter).eval()
            return peft(input_ids=ids).logits, peft.config

    trained, config = logits(out / "checkpoint-3")
    converted, _ = logits(out)
    base = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float32).eval()
    with torch.inference_mode():
        untouched = base(input_ids=ids).logits
    bound = fp32_logit_bound(base.config, trained)
    assert float((converted - trained).abs().max()) <= bound
    assert (
        float((trained - untouched).abs().max()) > 100 * bound
    )  # training changed the model: the comparison means something
    with pytest.raises(ConfigError, match="pissa_convert with additional_target"):
        load_config(None, {**cfg.model_dump(exclude_unset=True), "additional_target": "embed_tokens"})


def test_pissa_convert_after_resume_equals_the_uninterrupted_run(tiny_qwen, tmp_path):
    """The initial PiSSA adapter is kept in memory when the model is built (not read back from a checkpoint), so a run
    resumed from checkpoint-2 converts against the same initialisation: the saved adapter is bit-identical."""
    from safetensors.torch import load_file

    from tunekit.flow import run_train

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(32))
    common = dict(
        finetuning_type="lora",
        lora_rank=4,
        pissa_init=True,
        pissa_convert=True,
        learning_rate=1e-2,
        max_steps=4,
        save_strategy="steps",
        save_steps=2,
        gradient_checkpointing=False,
    )  # pissa_iter 16: randomised SVD
    run_train(load_config(None, base_config(tiny_qwen, data, tmp_path / "full", **common)))
    shutil.copytree(tmp_path / "full", tmp_path / "resumed")  # as if killed after checkpoint-2 was written
    shutil.rmtree(tmp_path / "resumed" / "checkpoint-4")
    for name in ("adapter_model.safetensors", "adapter_config.json", "all_results.json", "train_results.json"):
        (tmp_path / "resumed" / name).unlink(missing_ok=True)
    run_train(
        load_config(None, base_config(tiny_qwen, data, tmp_path / "resumed", resume_from_checkpoint=True, **common))
    )
    full = load_file(str(tmp_path / "full" / "adapter_model.safetensors"))
    resumed = load_file(str(tmp_path / "resumed" / "adapter_model.safetensors"))
    assert sorted(full) == sorted(resumed) and all(full[k].shape[0 if "lora_A" in k else 1] == 8 for k in full)
    assert all(full[k].equal(resumed[k]) for k in full)
