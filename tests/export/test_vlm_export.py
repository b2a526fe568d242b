"""Export and verify of vision-language and audio models on tiny random models of the real classes.

The contract: ``tunekit export`` of a LoRA trained on images writes a folder that plain transformers loads
(``AutoModelForImageTextToText`` + the family's processor) and that generates, greedily from an image, the same
token ids as the adapter model (base + PEFT adapter, unmerged). The inputs are built by transformers alone:
``AutoProcessor.apply_chat_template`` for LLaVA; for Qwen2-VL, whose ``Qwen2VLProcessor`` transformers cannot build
without torchvision (its video processor), the image processor, the tokenizer's official chat template and the
processor's own expansion rule (``image_grid_thw.prod() // merge_size**2`` image pads per image).
"""

from __future__ import annotations

import filecmp
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import write_dataset

SHAREGPT = {
    "formatting": "sharegpt",
    "columns": {"messages": "messages", "images": "images"},
    "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
}
RECORDS = [
    {
        "messages": [{"role": "user", "content": "<image>Who is this?"}, {"role": "assistant", "content": "Kane."}],
        "images": ["mllm_demo_data/1.jpg"],
    },
    {
        "messages": [{"role": "user", "content": "Describe <image>"}, {"role": "assistant", "content": "A speech."}],
        "images": ["mllm_demo_data/3.jpg"],
    },
]
LIKE = {"qwen2_vl": "qwen2-vl", "llava": "llava"}  # template -> tiny-model --like
#: merged vs unmerged logits in fp32: the bound `tunekit verify` enforces (verify.LOGIT_TOLERANCE);
#: measured 2.7e-7..4.6e-7
FP32_LOGITS = 1e-4
NEW_TOKENS = 6


@pytest.fixture(scope="module")
def image_data(tmp_path_factory, demo_dir) -> Path:
    data = tmp_path_factory.mktemp("vlm-export-data")
    shutil.copytree(demo_dir / "mllm_demo_data", data / "mllm_demo_data")
    write_dataset(data, "toy", RECORDS, SHAREGPT)
    return data


def _train(model: Path, template: str, data: Path, out: Path, method: str) -> Path:
    from tunekit.config import load_config
    from tunekit.flow import run_train

    run_train(
        load_config(
            None,
            {
                "model_name_or_path": str(model),
                "template": template,
                "dataset": "toy",
                "dataset_dir": str(data),
                "output_dir": str(out),
                "stage": "sft",
                "cutoff_len": 1024,
                "report_to": "none",
                "do_train": True,
                "finetuning_type": method,
                "per_device_train_batch_size": 2,
                "max_steps": 2,
                "logging_steps": 1,
                "save_strategy": "no",
                "learning_rate": 2e-2 if method == "lora" else 2e-3,
                "disable_tqdm": True,
                "seed": 0,
                "gradient_checkpointing": False,
                "lora_rank": 8,
            },
        )
    )
    return out


def _export(out: Path, template: str, model: Path, adapter: Path | None = None, **opts) -> Path:
    from tunekit.config import load_config
    from tunekit.export import export_model

    cfg = {"model_name_or_path": str(model), "template": template, "export_dir": str(out), **opts}
    if adapter is not None:
        cfg["adapter_name_or_path"] = str(adapter)
    return export_model(load_config(None, cfg), verify=False)


@pytest.fixture(scope="module")
def lora_exports(tmp_path_factory, image_data) -> dict[str, dict[str, Path]]:
    """Per family: the tiny base, a LoRA trained 2 steps on images, and its merged export."""
    from tunekit.tiny.vlm import build_tiny_vlm

    root, out = tmp_path_factory.mktemp("vlm-export"), {}
    for template, like in LIKE.items():
        base = build_tiny_vlm(root / f"{template}-base", like=like, seed=0)
        adapter = _train(base, template, image_data, root / f"{template}-lora", "lora")
        out[template] = {
            "base": base,
            "adapter": adapter,
            "export": _export(root / f"{template}-merged", template, base, adapter),
        }
    return out


def _image(demo_dir: Path):
    from PIL import Image

    return Image.open(demo_dir / "mllm_demo_data" / "2.jpg").convert("RGB")


def _plain_inputs(template: str, folder: Path, image) -> dict:
    """Prompt ids and image inputs for "<image> Who is this?" from plain transformers (see the module docstring)."""
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    conversation = [
        {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "Who is this?"}]}
    ]
    if template != "qwen2_vl":
        return dict(
            AutoProcessor.from_pretrained(folder).apply_chat_template(
                conversation, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
            )
        )
    tokenizer, images = AutoTokenizer.from_pretrained(folder), AutoImageProcessor.from_pretrained(folder)
    pixels = images(images=[image], return_tensors="pt")
    text = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    pads = int(pixels["image_grid_thw"][0].prod()) // images.merge_size**2  # Qwen2VLProcessor's rule
    ids = tokenizer(text.replace("<|image_pad|>", "<|image_pad|>" * pads), return_tensors="pt")
    image_pad = tokenizer.convert_tokens_to_ids(
        "<|image_pad|>"
    )  # mm_token_type_ids: 1 on image tokens (the processor's)
    return {**ids, **pixels, "mm_token_type_ids": (ids["input_ids"] == image_pad).long()}


def _greedy(model, inputs: dict, stops) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(
            **inputs, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=stops["eos"], pad_token_id=stops["pad"]
        )
    return out[0, inputs["input_ids"].shape[1] :].tolist()


def _stops(export: Path) -> dict:
    gen = json.loads((export / "generation_config.json").read_text())
    return {"eos": gen["eos_token_id"], "pad": gen["pad_token_id"]}


@pytest.mark.parametrize("template", sorted(LIKE))
def test_merged_vlm_generates_the_adapter_models_tokens_from_an_image(template, lora_exports, demo_dir):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    paths = lora_exports[template]
    export = paths["export"]
    merged = AutoModelForImageTextToText.from_pretrained(export).eval()
    reference = PeftModel.from_pretrained(
        AutoModelForImageTextToText.from_pretrained(paths["base"]), paths["adapter"]
    ).eval()
    inputs = _plain_inputs(template, export, _image(demo_dir))
    assert (
        inputs["input_ids"][0].tolist()
        == _plain_inputs(template, paths["base"], _image(demo_dir))["input_ids"][0].tolist()
    )
    with torch.no_grad():
        got, want = merged(**inputs).logits, reference(**inputs).logits
        with reference.disable_adapter():
            base = reference(**inputs).logits
    assert float((want - base).abs().max()) > 0.1  # 2 steps at lr 2e-2 moved the adapter's logits (measured 0.8-1.0)
    assert float((got - want).abs().max()) < FP32_LOGITS
    stops = _stops(export)
    ids = _greedy(merged, inputs, stops)
    assert len(ids) > 0 and ids == _greedy(reference, inputs, stops)


@pytest.mark.parametrize("template", sorted(LIKE))
def test_the_export_holds_the_processor_files_and_the_official_chat_template(template, lora_exports):
    from transformers import AutoTokenizer

    paths = lora_exports[template]
    base, export = paths["base"], paths["export"]
    copied = {"qwen2_vl": ["preprocessor_config.json"], "llava": ["processor_config.json"]}[template]
    for name in copied:
        assert filecmp.cmp(base / name, export / name, shallow=False)
    official = AutoTokenizer.from_pretrained(base).chat_template
    assert AutoTokenizer.from_pretrained(export).chat_template == official
    assert (
        AutoTokenizer.from_pretrained(paths["adapter"]).chat_template != official
    )  # training saved tunekit's text one
    recorded = json.loads((export / "tunekit_export.json").read_text())["multimodal"]
    architecture = {"qwen2_vl": "Qwen2VLForConditionalGeneration", "llava": "LlavaForConditionalGeneration"}[template]
    assert recorded == {"model_class": architecture, "processor_source": str(base), "processor_files": copied}


@pytest.mark.parametrize("template", sorted(LIKE))
def test_verify_checks_the_processor_prompt_and_the_merge_on_an_image(template, lora_exports, capsys):
    from tunekit.export.verify import print_report, verify_export

    report = verify_export(lora_exports[template]["export"])
    print_report(report)
    assert report["ok"] and not report.get("skipped"), capsys.readouterr().out
    checks = report["checks"]
    assert checks["media_prompt"].startswith(
        {
            "qwen2_vl": "the chat template's text == tunekit 'qwen2_vl' with one image token per image",
            "llava": "LlavaProcessor.apply_chat_template == tunekit 'llava' on an image conversation (",
        }[template]
    )
    assert report["max_abs_logit_diff"] < FP32_LOGITS < 0.1 < report["adapter_effect"]
    assert report["merged_generated_ids"] == report["adapter_generated_ids"]
    assert checks["merged_generate"] == f"greedy ids equal base + adapter's: {report['adapter_generated_ids']}"


def test_verify_names_a_missing_processor_file(lora_exports, tmp_path):
    from tunekit.export.verify import verify_export

    folder = tmp_path / "copy"
    shutil.copytree(lora_exports["qwen2_vl"]["export"], folder)
    (folder / "preprocessor_config.json").unlink()
    report = verify_export(folder)
    assert not report["ok"]
    assert report["problems"] == [
        f"{folder} has no preprocessor_config.json: AutoProcessor "
        f"cannot load the vision/audio processor of this model. Copy the base model's processor files into it "
        f"(AutoProcessor.from_pretrained(base).save_pretrained(folder)), or export again with tunekit export."
    ]


def test_verify_of_a_folder_tunekit_did_not_export_generates_from_the_processors_prompt(lora_exports):
    from tunekit.export.verify import verify_export

    report = verify_export(lora_exports["llava"]["base"])
    assert report["ok"] and report["skipped"] == {
        "media_prompt": "tunekit_export.json records no tunekit multimodal "
        "template to compare the processor's rendering with"
    }
    assert report["checks"]["processor"] == "LlavaProcessor" and report["generated_tokens"] > 0


def test_verify_fails_an_export_that_is_not_the_adapter_model(lora_exports, tmp_path):
    """The base's weights under the export's files: the adapter was not merged."""
    from tunekit.export.verify import verify_export

    paths = lora_exports["llava"]
    folder = tmp_path / "unmerged"
    shutil.copytree(paths["export"], folder)
    shutil.copyfile(paths["base"] / "model.safetensors", folder / "model.safetensors")
    (folder / "model.safetensors.index.json").unlink()
    report = verify_export(folder)
    assert (
        not report["ok"]
        and "the exported weights equal the base model: the adapter was not merged" in report["problems"]
    )


def test_full_fine_tuned_vlm_exports_with_its_bases_processor(tmp_path, image_data, demo_dir):
    """A full fine-tuning run folder has no processor files: the export takes them (and the official template) from
    the base its run recorded, and generates what the run folder itself generates."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from tunekit.tiny.vlm import build_tiny_vlm

    base = build_tiny_vlm(tmp_path / "base", like="llava", seed=0)
    run = _train(base, "llava", image_data, tmp_path / "full", "full")
    assert not (run / "processor_config.json").exists()
    export = _export(tmp_path / "merged", "llava", run)
    assert filecmp.cmp(base / "processor_config.json", export / "processor_config.json", shallow=False)
    assert AutoTokenizer.from_pretrained(export).chat_template == AutoTokenizer.from_pretrained(base).chat_template
    assert json.loads((export / "tunekit_export.json").read_text())["multimodal"]["processor_source"] == str(base)
    inputs = _plain_inputs("llava", export, _image(demo_dir))
    stops = _stops(export)
    trained, exported = (AutoModelForImageTextToText.from_pretrained(p).eval() for p in (run, export))
    with torch.no_grad():
        assert torch.equal(exported(**inputs).logits, trained(**inputs).logits)  # the same fp32 weights, no merge
    assert _greedy(exported, inputs, stops) == _greedy(trained, inputs, stops)


def test_quantized_vlm_export_is_refused_by_name(lora_exports, tmp_path):
    from tunekit.errors import ConfigError

    paths = lora_exports["qwen2_vl"]
    with pytest.raises(ConfigError) as err:
        _export(tmp_path / "q", "qwen2_vl", paths["base"], paths["adapter"], export_quantization_bit=4)
    assert str(err.value) == (
        "export_quantization_bit 4 (bnb) is not supported for 'qwen2_vl' models, which have a vision or audio part: "
        "tunekit quantizes text models only (GPTQ calibrates on text, and its bitsandbytes path loads "
        "AutoModelForCausalLM, which drops the vision/audio tower). Remove export_quantization_bit to export the "
        "merged "
        "model unquantized. Nothing was written."
    )
    assert err.value.problems[0].fields == ("export_quantization_bit",)
    assert not (tmp_path / "q").exists()


def test_a_text_template_for_a_vlm_export_is_refused_by_name(lora_exports, tmp_path):
    from tunekit.errors import ConfigError

    paths = lora_exports["qwen2_vl"]
    with pytest.raises(ConfigError) as err:
        _export(tmp_path / "t", "qwen", paths["base"], paths["adapter"])
    assert str(err.value) == (
        f"template 'qwen' is not a multimodal template, but {paths['base']} is a vision-language/audio model "
        "(model_type "
        f"'qwen2_vl'): set template to the one it was trained with (qwen2_vl), so the export's stop tokens and "
        f"`tunekit verify` follow it. Nothing was written."
    )
    assert not (tmp_path / "t").exists()
    with pytest.raises(ConfigError, match=r"^unknown template 'moss_vl'\."):  # LLaMA-Factory's mossvl merge example
        _export(tmp_path / "t", "moss_vl", paths["base"], paths["adapter"])
    assert not (tmp_path / "t").exists()


def test_a_model_folder_without_processor_files_is_a_named_error(lora_exports, tmp_path):
    from tunekit.errors import ModelError

    paths = lora_exports["llava"]
    bare = tmp_path / "bare"
    shutil.copytree(paths["base"], bare)
    (bare / "processor_config.json").unlink()
    with pytest.raises(ModelError) as err:
        _export(tmp_path / "out", "llava", bare, paths["adapter"])
    assert str(err.value) == (
        f"{bare} has no preprocessor_config.json or processor_config.json: the exported vision-language/audio model "
        "would have no image processor (feature extractor), so AutoProcessor could not load it. Copy the base "
        "model's "
        f"processor files into {bare} (AutoProcessor.from_pretrained(base).save_pretrained(folder)), then export "
        "again."
    )


def _seeded_adapter(base: Path, out: Path) -> Path:
    """A LoRA on the language model with non-zero B (peft's ``init_lora_weights=False``, seed
    0): no training needed."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig

    from tunekit.model.multimodal import model_class

    model = model_class(AutoConfig.from_pretrained(base)).from_pretrained(base)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        lora = LoraConfig(
            r=4, lora_alpha=8, target_modules=r".*language_model.*\.(q_proj|v_proj|down_proj)", init_lora_weights=False
        )
        get_peft_model(model, lora).save_pretrained(out)
    return out


def _decode_16k(path: Path):
    """Mono float32 at 16 kHz through PyAV (the file's own rate is 16 kHz mono: passed through)."""
    import av
    import numpy as np

    with av.open(str(path)) as c:
        resampler = av.AudioResampler(format="fltp", rate=16000)
        chunks = [g.to_ndarray() for f in c.decode(c.streams.audio[0]) for g in resampler.resample(f)]
        chunks += [g.to_ndarray() for g in resampler.resample(None)]
    return np.concatenate(chunks, axis=1).mean(axis=0).astype(np.float32)


def test_merged_qwen2_audio_generates_the_adapter_models_tokens_from_an_audio(tmp_path, demo_dir):
    import torch
    from peft import PeftModel
    from transformers import AutoProcessor, Qwen2AudioForConditionalGeneration

    from tunekit.export.verify import verify_export
    from tunekit.tiny.vlm import build_tiny_vlm

    base = build_tiny_vlm(tmp_path / "base", like="qwen2-audio", seed=0)
    adapter = _seeded_adapter(base, tmp_path / "lora")
    export = _export(tmp_path / "merged", "qwen2_audio", base, adapter)
    assert filecmp.cmp(base / "preprocessor_config.json", export / "preprocessor_config.json", shallow=False)
    conversation = [
        {
            "role": "user",
            "content": [
                {"type": "audio", "audio": _decode_16k(demo_dir / "mllm_demo_data" / "2.wav")},
                {"type": "text", "text": "What is said?"},
            ],
        }
    ]
    inputs = AutoProcessor.from_pretrained(export).apply_chat_template(
        conversation, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )
    merged = Qwen2AudioForConditionalGeneration.from_pretrained(export).eval()
    reference = PeftModel.from_pretrained(Qwen2AudioForConditionalGeneration.from_pretrained(base), adapter).eval()
    with torch.no_grad():
        got, want = merged(**inputs).logits, reference(**inputs).logits
    assert float((got - want).abs().max()) < FP32_LOGITS
    stops = _stops(export)
    ids = _greedy(merged, inputs, stops)
    assert len(ids) > 0 and ids == _greedy(reference, inputs, stops)
    report = verify_export(export)
    assert report["ok"] and not report.get("skipped") and report["checks"]["processor"] == "Qwen2AudioProcessor"
    assert report["checks"]["media_prompt"].startswith(
        "Qwen2AudioProcessor.apply_chat_template == tunekit 'qwen2_audio' on an audio conversation ("
    )


def test_qwen3_vl_export_keeps_its_video_processor_and_official_template(tmp_path):
    from transformers import AutoTokenizer

    from tunekit.export.verify import verify_export
    from tunekit.tiny.vlm import build_tiny_vlm

    base = build_tiny_vlm(tmp_path / "base", like="qwen3-vl", seed=0)
    export = _export(tmp_path / "merged", "qwen3_vl_nothink", base, _seeded_adapter(base, tmp_path / "lora"))
    for name in ("preprocessor_config.json", "video_preprocessor_config.json"):
        assert filecmp.cmp(base / name, export / name, shallow=False)
    assert AutoTokenizer.from_pretrained(export).chat_template == AutoTokenizer.from_pretrained(base).chat_template
    report = verify_export(export)
    assert report["ok"] and not report.get("skipped"), report["problems"]
    assert report["checks"]["processor_files"] == "preprocessor_config.json, video_preprocessor_config.json"
    assert report["merged_generated_ids"] == report["adapter_generated_ids"]
