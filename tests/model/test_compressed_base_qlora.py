"""QLoRA on a pre-quantized compressed-tensors base (the format of tunekit's GPTQ export: pack-quantized int4 / int8,
weights only), on the CPU with a tiny Qwen2.

The folder is written with compressed-tensors' own API (no llm-compressor): round-to-nearest scales on GPTQ's grid,
then ``ModelCompressor.compress_model``, as llm-compressor saves it. transformers 5.24 decompresses such a base for
training (``dequantize: true``; compressed-tensors 0.19 has no kernel that computes with the packed weights), so
the adapter trains against exactly the saved b-bit weights, held in the load dtype.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import ROOT, alpaca_records, base_config, logged_losses, write_dataset
from tests.memory_helpers import measured_cfg, storage_bytes
from tunekit.config import load_config
from tunekit.errors import ConfigError, EnvironmentProblem
from tunekit.export.gptq_check import dequantized_weights, round_to_nearest

pytest.importorskip("compressed_tensors", reason="a compressed-tensors base loads through tunekit[quant]")
# transformers' notice when from_pretrained gets CompressedTensorsConfig(dequantize=True) for a quantized folder: the
# documented way plain transformers loads such a base for fine-tuning, which these tests use on purpose
pytestmark = pytest.mark.filterwarnings("ignore:You passed `quantization_config` or equivalent parameters:UserWarning")
EXAMPLE = ROOT / "examples" / "qlora" / "qwen_gptq_base_lora_sft.yaml"
GROUP = 32  # two or more groups in every row of the tiny model (hidden 64, intermediate 256)


def _compress(source: Path, out: Path, bits: int, activations: dict | None = None) -> Path:
    """``source`` saved as compressed-tensors would save it after quantization: weights only (W4A16 / W8A16), symmetric
    groups of GROUP columns, scale = group absmax / (2**bits - 1) * 2 (tunekit's RTN yardstick), LM head kept."""
    import torch
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
        QuantizationStatus,
        apply_quantization_config,
    )
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    weights = QuantizationArgs(num_bits=bits, type="int", symmetric=True, strategy="group", group_size=GROUP)
    scheme = QuantizationScheme(targets=["Linear"], weights=weights, input_activations=activations)
    config = QuantizationConfig(
        config_groups={"group_0": scheme}, ignore=["lm_head"], quantization_status=QuantizationStatus.FROZEN
    )
    apply_quantization_config(model, config, show_progress=False)
    top = 2 ** (bits - 1)
    with torch.no_grad():
        for module in model.modules():
            if getattr(module, "quantization_scheme", None) is not None:
                groups = module.weight.reshape(module.weight.shape[0], -1, GROUP)
                module.weight_scale.copy_(groups.abs().amax(-1) / ((2 * top - 1) / 2))
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="pack-quantized")
    compressor.compress_model(model)
    model.save_pretrained(out)
    compressor.update_config(out)
    for file in source.iterdir():  # the tokenizer, chat template and generation config
        if not (out / file.name).exists():
            shutil.copy(file, out / file.name)
    return out


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    from tunekit.tiny.text import build_tiny_model

    root = tmp_path_factory.mktemp("ct-base")
    tiny = build_tiny_model(root / "tiny", like="qwen2", seed=0)
    return {"tiny": tiny, "w4": _compress(tiny, root / "w4a16", 4), "root": root}


@pytest.fixture(scope="module")
def trained(bases):
    """LoRA trained on the 4-bit base by tunekit train's flow (8 steps over 8 rows); the base's files before it."""
    from tunekit.flow import run_train

    root = bases["root"]
    write_dataset(root / "data", "toy", alpaca_records(8, seed=1))
    before = _digest(bases["w4"])
    options = base_config(bases["w4"], root / "data", root / "out", finetuning_type="lora", lora_target="all")
    run_train(load_config(None, {**options, "max_steps": 8, "learning_rate": 1e-2, "use_cpu": True}))
    return {"out": root / "out", "before": before, "options": options}


def _plain_merged(bases, adapter: Path):
    """Base + adapter with plain transformers and peft: the base decompressed at load (CompressedTensorsConfig's
    dequantize, what transformers documents for fine-tuning), the adapter merged as tunekit merges it to infer."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    base = AutoModelForCausalLM.from_pretrained(
        bases["w4"], dtype=torch.float32, quantization_config=CompressedTensorsConfig(dequantize=True)
    )
    return PeftModel.from_pretrained(base, str(adapter)).merge_and_unload().eval()


def _digest(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _load(folder: Path, **options):
    from tunekit.model.loader import load_model, load_tokenizer

    cfg = load_config(None, dict(model_name_or_path=str(folder), template="qwen", dtype="float32", **options))
    return load_model(cfg, load_tokenizer(cfg), is_trainable=False)


def test_the_folder_is_a_gptq_export_and_loads_to_exactly_its_quantized_weights(bases):
    """The quantized Linear layers hold code x scale as tunekit's own reader of the packed file computes it (not the
    unquantized weights), everything else the tiny model's weights; nothing stays packed."""
    import torch
    from transformers import AutoModelForCausalLM

    quant = json.loads((bases["w4"] / "config.json").read_text())["quantization_config"]
    group = quant["config_groups"]["group_0"]
    assert (quant["quant_method"], quant["format"], quant["ignore"]) == (
        "compressed-tensors",
        "pack-quantized",
        ["lm_head"],
    )
    assert (group["weights"]["num_bits"], group["weights"]["group_size"], group["input_activations"]) == (
        4,
        GROUP,
        None,
    )
    model = _load(bases["w4"], finetuning_type="lora")
    original = AutoModelForCausalLM.from_pretrained(bases["tiny"], dtype=torch.float32)
    assert getattr(model.config, "quantization_config", None) is None
    assert not [n for n, _ in model.named_parameters() if "weight_packed" in n or "weight_scale" in n]
    layers = 0
    for name, weight in dequantized_weights(bases["w4"]):
        loaded = model.get_submodule(name).weight
        assert torch.equal(loaded, weight) and not torch.equal(loaded, original.get_submodule(name).weight)
        assert torch.equal(weight, round_to_nearest(original.get_submodule(name).weight, 4, GROUP))
        layers += 1
    assert layers == 2 * 7  # q, k, v, o, gate, up, down in each of the 2 layers
    for name in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"):
        assert torch.equal(model.get_parameter(name), original.get_parameter(name))


def test_qlora_trains_only_the_adapter_which_plain_peft_reloads_on_the_same_base(bases, trained):
    import torch
    from safetensors.torch import load_file

    out = trained["out"]
    assert _digest(bases["w4"]) == trained["before"]  # the quantized base stays as saved
    losses = logged_losses(out)  # 8 rows, 4 per step: every 2 steps are one epoch over the same rows
    assert len(losses) == 8 and sum(losses[-2:]) < sum(losses[:2])
    saved = load_file(str(out / "adapter_model.safetensors"))
    assert saved and all(".lora_A." in k or ".lora_B." in k for k in saved)
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(bases["w4"])

    plain = _plain_merged(bases, out)
    ours = _load(bases["w4"], finetuning_type="lora", adapter_name_or_path=str(out))
    bare = _load(bases["w4"], finetuning_type="lora")
    ids = torch.tensor([[5, 17, 42, 99, 7, 3]])
    with torch.inference_mode():
        expected = plain(input_ids=ids).logits
        assert torch.equal(ours(input_ids=ids).logits, expected)
        assert not torch.equal(bare(input_ids=ids).logits, expected)  # the adapter changes the model


def test_export_merges_the_adapter_into_a_dense_model(bases, trained, tmp_path):
    """tunekit export: the base's dequantized weights + the adapter, saved unquantized, and tunekit verify's checks
    (merged logits against base + adapter among them) pass."""
    import torch
    from transformers import AutoModelForCausalLM

    from tunekit.export import export_model

    merged = tmp_path / "merged"
    options = dict(model_name_or_path=str(bases["w4"]), adapter_name_or_path=str(trained["out"]), template="qwen")
    export_model(load_config(None, {**options, "finetuning_type": "lora", "export_dir": str(merged)}), verify=True)
    assert "quantization_config" not in json.loads((merged / "config.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)
    ids = torch.tensor([[5, 17, 42, 99, 7, 3]])
    with torch.inference_mode():
        assert torch.equal(model(input_ids=ids).logits, _plain_merged(bases, trained["out"])(input_ids=ids).logits)


def test_the_example_trains_on_a_compressed_base(bases, tmp_path):
    """The example's own options; only the model (the tiny base), output_dir, dataset_dir and the steps substituted,
    as tests/project/test_examples_run.py does for the other examples."""
    import yaml

    from tunekit.flow import run_train

    options = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert options["finetuning_type"] == "lora" and "quantization_bit" not in options
    options.update(
        model_name_or_path=str(bases["w4"]),
        output_dir=str(tmp_path / "out"),
        dataset_dir=str(ROOT / options["dataset_dir"]),
        max_steps=2,
    )
    assert run_train(load_config(None, options))["total_steps"] == 2
    assert (tmp_path / "out" / "adapter_model.safetensors").is_file()


def test_chat_and_predict_load_the_base_with_the_adapter(bases, trained, tmp_path):
    """tunekit chat's engine and tunekit predict on base + adapter: the greedy reply is plain peft's."""
    import torch

    from tunekit.infer.engine import ChatEngine
    from tunekit.infer.predict import run_predict

    out = trained["out"]
    chat = dict(model_name_or_path=str(bases["w4"]), adapter_name_or_path=str(out), template="qwen")
    engine = ChatEngine(load_config(None, {**chat, "finetuning_type": "lora", "infer_dtype": "float32"}))
    prompt = engine.render([{"role": "user", "content": "What is 3 plus 4?"}])
    streamed = "".join(engine.start_ids(prompt, max_new_tokens=4, do_sample=False))  # what chat streams
    plain = _plain_merged(bases, out)
    new: list[int] = []
    with torch.inference_mode():
        while len(new) < 4 and not (new and new[-1] in engine.stop_ids):
            new.append(int(plain(input_ids=torch.tensor([prompt + new])).logits[0, -1].argmax()))
    assert streamed == engine.decode([t for t in new if t not in engine.stop_ids])

    predicted = tmp_path / "predict"
    options = {
        **trained["options"],
        "dataset": None,
        "do_train": False,
        "do_predict": True,
        "eval_dataset": "toy",
        "output_dir": str(predicted),
        "adapter_name_or_path": str(out),
        "predict_with_generate": True,
        "max_new_tokens": 2,
    }
    run_predict(load_config(None, options))
    assert len((predicted / "generated_predictions.jsonl").read_text().splitlines()) == 8


def test_the_plan_counts_the_base_as_the_run_holds_it(bases):
    """Decompressed at load, the base takes its dense size in the load dtype: the planner's base weights and
    adapter are the bytes of the model tunekit loads for training, as for the unquantized model."""
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.memory import estimate_memory
    from tunekit.plan.training_setup import resolve_setup

    cfg = measured_cfg(bases["w4"], finetuning_type="lora", lora_target="all")
    model = load_model(cfg, load_tokenizer(cfg))
    params = list(model.parameters())
    planned = estimate_memory(load_shape(str(bases["w4"]), None), resolve_setup(cfg)).components
    assert planned["base_weights"] + planned["trainable_params"] == storage_bytes(params)
    assert planned["trainable_params"] == storage_bytes([p for p in params if p.requires_grad])
    unquantized = estimate_memory(load_shape(str(bases["tiny"]), None), resolve_setup(cfg)).components
    assert planned["base_weights"] == unquantized["base_weights"]


def test_refusals_name_the_package_and_the_scheme(bases, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM

    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.train.preflight import check_quantization

    folder = bases["w4"]
    cfg = load_config(None, dict(model_name_or_path=str(folder), template="qwen", finetuning_type="lora"))
    w8a8 = bases["root"] / "w8a8"
    if not w8a8.exists():
        activations = dict(num_bits=8, type="int", symmetric=True, strategy="token", dynamic=True)
        _compress(bases["tiny"], w8a8, 8, activations=activations)
    with pytest.raises(ConfigError) as err:
        check_quantization(cfg.model_copy(update={"model_name_or_path": str(w8a8)}))  # before any process starts
    assert str(err.value) == (
        f"{w8a8} is a compressed-tensors model that quantizes input_activations too: tunekit trains such a base only "
        f"as transformers decompresses it (weights back to the load dtype, activations unquantized), so the adapter "
        f"would train on another model than the one saved. Use a weight-only model (W4A16 / W8A16, as tunekit's "
        f"GPTQ export writes) or the unquantized model."
    )
    with pytest.raises(ConfigError) as again:  # an adapter on it: the same reason
        _load(w8a8, finetuning_type="lora", adapter_name_or_path=str(w8a8 / "adapter"))
    assert str(again.value) == str(err.value)
    ids = torch.tensor([[5, 17, 42]])
    plain = AutoModelForCausalLM.from_pretrained(w8a8, dtype=torch.float32)
    with torch.inference_mode():  # chat without an adapter: transformers' own loading (activations quantized)
        assert torch.equal(_load(w8a8, finetuning_type="lora")(input_ids=ids).logits, plain(input_ids=ids).logits)
    with pytest.raises(ConfigError, match=r"is already quantized \(compressed-tensors\): remove quantization_bit"):
        check_quantization(cfg.model_copy(update={"quantization_bit": 4}))
    with pytest.raises(ConfigError, match="its quantized weights cannot be trained directly; set finetuning_type"):
        check_quantization(cfg.model_copy(update={"finetuning_type": "full"}))

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "compressed_tensors" else real(name, *a)
    )
    for check in (lambda: check_quantization(cfg), lambda: load_model(cfg, load_tokenizer(cfg))):
        with pytest.raises(EnvironmentProblem) as err:
            check()
        assert str(err.value) == (
            f"{folder} is a pre-quantized compressed-tensors model (quantization_config in config.json; tunekit's "
            f"GPTQ export writes this format); transformers loads it through the compressed-tensors package, "
            f"missing here: pip install 'tunekit[quant]' (or pip install 'compressed-tensors==0.19.0')."
        )
