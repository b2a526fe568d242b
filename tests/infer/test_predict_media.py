"""`tunekit predict` on multimodal eval sets: LLaMA-Factory's demo data through its dataset_info.json.

Each prediction must equal plain transformers' greedy ``generate`` for the same record: the model's own chat
template with the record's media parts (Qwen2-VL: each ``<|image_pad|>`` repeated as the image processor's grid
says; Qwen2-Audio: transformers' own ``Qwen2AudioProcessor``), the processor's pixels / features, no tunekit code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import REFERENCE_DATA

DEMO = REFERENCE_DATA
SMALL = 28 * 28 * 16  # image_max_pixels: 1.jpg (300x168) -> 10 image tokens, 2.jpg -> 12
NEW = 5


@pytest.fixture(scope="module")
def demo() -> Path:
    if not (DEMO / "dataset_info.json").is_file():
        pytest.skip(f"reference data not found at {DEMO}")
    return DEMO


@pytest.fixture(scope="module")
def tiny_vl(tmp_path_factory) -> Path:
    from tunekit.tiny.vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen2-vl") / "model", like="qwen2-vl", seed=0)


def _predict(tmp_path: Path, **opts) -> list[dict]:
    from tunekit.cli.predict_cmd import main

    args = {
        **dict(
            dataset_dir=str(DEMO),
            max_samples=2,
            do_sample="false",
            max_new_tokens=NEW,
            cutoff_len=2048,
            output_dir=str(tmp_path / "out"),
            disable_tqdm="true",
            per_device_eval_batch_size=2,
        ),
        **opts,
    }
    assert main([f"{k}={v}" for k, v in args.items()]) == 0
    return [json.loads(line) for line in (tmp_path / "out" / "generated_predictions.jsonl").read_text().splitlines()]


def _parts(text: str, tag: str, kind: str) -> list[dict]:
    """``"<image>Who?"`` -> ``[{"type": "image"}, {"type": "text", "text": "Who?"}]`` (the
    official template's parts)."""
    out = []
    for k, piece in enumerate(text.split(tag)):
        if k:
            out.append({"type": kind})
        if piece:
            out.append({"type": "text", "text": piece})
    return out


def _greedy(model, tok, ids: list[int], **inputs) -> str:
    import torch

    x = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(
            input_ids=x,
            attention_mask=torch.ones_like(x),
            max_new_tokens=NEW,
            do_sample=False,
            eos_token_id=[tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id],
            pad_token_id=tok.pad_token_id,
            **inputs,
        )
    return tok.decode(out[0, x.shape[1] :].tolist(), skip_special_tokens=True)


def test_predict_on_mllm_demo_equals_plain_transformers(demo, tiny_vl, tmp_path):
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    model_dir = tiny_vl
    rows = _predict(
        tmp_path, model_name_or_path=model_dir, template="qwen2_vl", eval_dataset="mllm_demo", image_max_pixels=SMALL
    )
    tok = AutoTokenizer.from_pretrained(model_dir)
    processor = Qwen2VLImageProcessorPil.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    pad = "<|image_pad|>"
    records = json.loads((demo / "mllm_demo.json").read_text(encoding="utf-8"))[:2]
    counts_seen = []
    for row, record in zip(rows, records):
        prompt = record["messages"][:-1]
        conversation = [
            {
                "role": m["role"],
                "content": _parts(m["content"], "<image>", "image") if m["role"] == "user" else m["content"],
            }
            for m in prompt
        ]
        text = tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        images = [Image.open(demo / p).convert("RGB") for p in record["images"]]
        pixels = processor(images=images, size={"shortest_edge": 32 * 32, "longest_edge": SMALL}, return_tensors="pt")
        counts = [int(g.prod()) // processor.merge_size**2 for g in pixels["image_grid_thw"]]
        pieces = text.split(pad)
        assert len(pieces) == len(counts) + 1
        text = pieces[0] + "".join(pad * n + rest for n, rest in zip(counts, pieces[1:]))
        ids = tok(text, add_special_tokens=False)["input_ids"]
        want = _greedy(
            model,
            tok,
            ids,
            pixel_values=pixels["pixel_values"],
            image_grid_thw=pixels["image_grid_thw"],
            mm_token_type_ids=(torch.tensor([ids]) == tok.convert_tokens_to_ids(pad)).long(),
        )
        assert (row["prompt"], row["predict"], row["label"]) == (
            tok.decode(ids),
            want,
            record["messages"][-1]["content"],
        )
        counts_seen.append(counts)
    assert counts_seen == [[10, 10], [12]]  # record 0 has two images (two turns), record 1 one
    assert rows[0]["predict"] != rows[1]["predict"]


def test_predict_on_the_audio_demo_equals_qwen2_audio_processor(demo, tmp_path):
    av = pytest.importorskip("av")
    import numpy as np
    from transformers import (
        AutoTokenizer,
        Qwen2AudioForConditionalGeneration,
        Qwen2AudioProcessor,
        WhisperFeatureExtractor,
    )

    from tunekit.tiny.vlm import build_tiny_vlm

    model_dir = build_tiny_vlm(tmp_path / "model", like="qwen2-audio", seed=0)
    rows = _predict(tmp_path, model_name_or_path=model_dir, template="qwen2_audio", eval_dataset="mllm_audio_demo")
    tok = AutoTokenizer.from_pretrained(model_dir)
    processor = Qwen2AudioProcessor(
        feature_extractor=WhisperFeatureExtractor.from_pretrained(model_dir), tokenizer=tok
    )
    model = Qwen2AudioForConditionalGeneration.from_pretrained(model_dir).eval()
    for row, record in zip(rows, json.loads((demo / "mllm_audio_demo.json").read_text(encoding="utf-8"))[:2]):
        with av.open(str(demo / record["audios"][0])) as c:  # mono 16 kHz floats, as the processor expects
            resampler = av.AudioResampler(format="fltp", rate=16000)
            chunks = [g.to_ndarray() for f in c.decode(c.streams.audio[0]) for g in resampler.resample(f)]
            chunks += [g.to_ndarray() for g in resampler.resample(None)]
        audio = np.concatenate(chunks, axis=1).mean(axis=0)
        conversation = [
            {
                "role": "user",
                "content": [
                    {"type": "audio", "audio_url": "x"},
                    {"type": "text", "text": record["messages"][0]["content"][7:]},
                ],
            }
        ]
        text = processor.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        inputs = processor(text=[text], audio=[audio], sampling_rate=16000, return_tensors="pt")
        want = _greedy(
            model,
            tok,
            inputs["input_ids"][0].tolist(),
            input_features=inputs["input_features"],
            feature_attention_mask=inputs["feature_attention_mask"],
        )
        assert (row["prompt"], row["predict"]) == (tok.decode(inputs["input_ids"][0]), want)


def test_a_text_model_refuses_a_multimodal_eval_set_naming_the_record(demo, tiny_qwen, tmp_path):
    from tunekit.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        _predict(tmp_path, model_name_or_path=tiny_qwen, template="qwen", eval_dataset="mllm_demo")
    assert str(err.value) == (
        f"{demo / 'mllm_demo.json'}, record 0: this model (template 'qwen') is text only and cannot read images: use "
        "a "
        f"vision-language model with its multimodal template (qwen2_vl, qwen3_vl, llava, llava_next, gemma3, smolvlm; "
        f"qwen2_audio for audio), or remove the images."
    )


def test_do_predict_after_training_predicts_with_the_images(demo, tiny_vl, tmp_path):
    """`tunekit train` with do_predict on mllm_demo: the trained model's predictions equal `tunekit predict` with the
    saved adapter (both with the images; without them Qwen2-VL could not run the prompt at all)."""
    from tunekit.config import load_config
    from tunekit.flow import run_train

    model_dir = tiny_vl
    cfg = dict(
        model_name_or_path=str(model_dir),
        template="qwen2_vl",
        dataset_dir=str(demo),
        image_max_pixels=SMALL,
        max_samples=2,
        do_sample=False,
        max_new_tokens=NEW,
        cutoff_len=2048,
        disable_tqdm=True,
        report_to="none",
    )
    run_train(
        load_config(
            None,
            dict(
                cfg,
                stage="sft",
                do_train=True,
                do_predict=True,
                dataset="mllm_demo",
                eval_dataset="mllm_demo",
                output_dir=str(tmp_path / "run"),
                finetuning_type="lora",
                lora_target="all",
                learning_rate=0.05,
                max_steps=2,
                save_strategy="no",
                per_device_train_batch_size=1,
            ),
        )
    )
    trained = [
        json.loads(line) for line in (tmp_path / "run" / "generated_predictions.jsonl").read_text().splitlines()
    ]
    again = _predict(
        tmp_path,
        model_name_or_path=model_dir,
        template="qwen2_vl",
        eval_dataset="mllm_demo",
        image_max_pixels=SMALL,
        adapter_name_or_path=tmp_path / "run",
    )
    assert [r["predict"] for r in trained] == [r["predict"] for r in again]
    base = _predict(
        tmp_path / "base",
        model_name_or_path=model_dir,
        template="qwen2_vl",
        eval_dataset="mllm_demo",
        image_max_pixels=SMALL,
    )
    assert [r["predict"] for r in base] != [r["predict"] for r in trained]  # the adapter is what predicted
    assert [r["prompt"].count("<|image_pad|>") for r in trained] == [20, 12]


def test_a_missing_image_in_the_eval_set_is_named_before_the_model_loads(tmp_path):
    from tests.helpers import write_dataset
    from tunekit.errors import DataError

    entry = {
        "formatting": "sharegpt",
        "columns": {"messages": "messages", "images": "images"},
        "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
    }
    records = [
        {
            "messages": [{"role": "user", "content": "<image>Who?"}, {"role": "assistant", "content": "Me."}],
            "images": ["missing.jpg"],
        }
    ]
    write_dataset(tmp_path / "data", "toy", records, entry)
    with pytest.raises(DataError) as err:  # the model folder does not even exist: data mistakes come first
        _predict(
            tmp_path,
            model_name_or_path=tmp_path / "no-model",
            template="qwen2_vl",
            eval_dataset="toy",
            dataset_dir=tmp_path / "data",
        )
    assert str(err.value) == (
        f"{tmp_path / 'data' / 'toy.json'}, record 0: images[0] 'missing.jpg' not found (looked for "
        f"{tmp_path / 'data' / 'missing.jpg'}). Fix the path, or set media_dir to the folder the paths are relative "
        "to. "
        f"(dataset 'toy'; set bad_records: skip to skip invalid records)"
    )
