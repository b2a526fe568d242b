"""Qwen3-VL: tiny model, token layout of images and videos = inference, what trains, SFT LoRA end to end.

The inference reference is the official chat template (Qwen/Qwen3-VL-8B-Instruct's, saved with the tiny
model; its SHA-256 is pinned below) rendered by transformers, with the processor's expansion applied:
``<|image_pad|>`` -> grid / merge² copies (``Qwen3VLProcessor.replace_image_token``) and each
``<|vision_start|><|video_pad|><|vision_end|>`` -> one ``<t seconds><|vision_start|>`` + h·w/merge² ×
``<|video_pad|>`` + ``<|vision_end|>`` block per temporal patch (Qwen's processor rule; the processor class
itself needs torchvision). Time stamps and grids are computed here from the stream metadata alone.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest

from tests.helpers import logged_losses

TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}
OPTS = {
    "image_max_pixels": 64 * 64,
    "image_min_pixels": 32 * 32,
    "video_max_pixels": 64 * 64,
    "video_maxlen": 4,
    "video_fps": 2.0,
}
IMAGE_RECORD = {
    "messages": [{"role": "user", "content": "<image>Who is this?"}, {"role": "assistant", "content": "Kane."}],
    "images": ["mllm_demo_data/1.jpg"],
}
VIDEO_RECORD = {
    "messages": [
        {"role": "user", "content": "<video>What is she doing?"},
        {"role": "assistant", "content": "She is cooking."},
    ],
    "videos": ["mllm_demo_data/2.avi"],
}


@pytest.fixture(scope="module")
def demo_dir(demo_dir) -> Path:
    """conftest's demo folder, and PyAV to decode its videos."""
    pytest.importorskip("av")
    return demo_dir


@pytest.fixture(scope="module")
def tiny_qwen3_vl(tmp_path_factory) -> Path:
    from tunekit.cli.tiny_model_cmd import main as tiny_model

    out = tmp_path_factory.mktemp("tiny-qwen3-vl") / "model"
    assert tiny_model([str(out), "--like", "qwen3-vl"]) == 0
    return out


def data_dir_with(tmp_path: Path, demo_dir: Path, records: list[dict]) -> Path:
    data = tmp_path / "data"
    data.mkdir(parents=True, exist_ok=True)
    shutil.copytree(demo_dir / "mllm_demo_data", data / "mllm_demo_data", dirs_exist_ok=True)
    (data / "toy.json").write_text(json.dumps(records), encoding="utf-8")
    info = {
        "toy": {
            "file_name": "toy.json",
            "formatting": "sharegpt",
            "tags": TAGS,
            "columns": {"messages": "messages", "images": "images", "videos": "videos"},
        }
    }
    (data / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    return data


def cfg_for(model, data_dir, tmp_path, **opts):
    from tunekit.config import load_config

    base = {
        "model_name_or_path": str(model),
        "template": "qwen3_vl_nothink",
        "dataset": "toy",
        "dataset_dir": str(data_dir),
        "output_dir": str(tmp_path / "out"),
        "stage": "sft",
        "cutoff_len": 1024,
        "report_to": "none",
        **OPTS,
    }
    return load_config(None, {**base, **opts})


def prepare(model, data_dir, tmp_path, **opts):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    cfg = cfg_for(model, data_dir, tmp_path, **opts)
    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok, "sft"), tok, cfg


def video_blocks(path: str, cfg, model: Path) -> str:
    """The processor's text for one video, from its metadata (LLaMA-Factory's sampling and frame size)."""
    import av
    import numpy as np

    with av.open(path) as c:
        s = c.streams.video[0]
        n = min(s.frames, cfg.video_maxlen, max(1, math.floor(float(s.duration * s.time_base) * cfg.video_fps)))
        indices = np.linspace(0, s.frames - 1, n).astype(np.int32).tolist()
        fps, width, height = float(s.average_rate), s.width, s.height
    f = math.sqrt(cfg.video_max_pixels / (width * height))
    width, height = int(width * f), int(height * f)
    frames = n + n % 2
    spec = json.loads((model / "video_preprocessor_config.json").read_text(encoding="utf-8"))
    # Qwen3VLVideoProcessor's smart_resize: t_bar * h * w against the whole clip's budget (factor 32)
    h, w = round(height / 32) * 32, round(width / 32) * 32
    if frames * h * w > spec["size"]["longest_edge"]:
        beta = math.sqrt(frames * height * width / spec["size"]["longest_edge"])
        h, w = max(32, math.floor(height / beta / 32) * 32), max(32, math.floor(width / beta / 32) * 32)
    times = [i / fps for i in indices] + [indices[-1] / fps] * (len(indices) % 2)  # _calculate_timestamps
    stamps = [(times[i] + times[i + 1]) / 2 for i in range(0, len(times), 2)]
    per_frame = (h // 16) * (w // 16) // 4
    return "".join(
        f"<{t:.1f} seconds><|vision_start|>" + "<|video_pad|>" * per_frame + "<|vision_end|>" for t in stamps
    )


def official_ids(model: Path, record: dict, root: Path, cfg) -> list[int]:
    from PIL import Image
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tok = AutoTokenizer.from_pretrained(model)
    conversation = []
    for m in record["messages"]:
        text = m["content"]
        for tag, part in (("<image>", {"type": "image"}), ("<video>", {"type": "video"})):
            if text.startswith(tag):
                conversation.append({"role": m["role"], "content": [part, {"type": "text", "text": text[len(tag) :]}]})
                break
        else:
            conversation.append({"role": m["role"], "content": text})
    text = tok.apply_chat_template(conversation, tokenize=False)
    for p in record.get("images", []):
        grid = Qwen2VLImageProcessorPil.from_pretrained(model)(
            images=[Image.open(root / p).convert("RGB")],
            size={"shortest_edge": cfg.image_min_pixels, "longest_edge": cfg.image_max_pixels},
        )["image_grid_thw"][0]
        text = text.replace("<|image_pad|>", "<|placeholder|>" * (int(grid.prod()) // 4), 1)
    for p in record.get("videos", []):
        text = text.replace("<|vision_start|><|video_pad|><|vision_end|>", video_blocks(str(root / p), cfg, model), 1)
    return tok(text.replace("<|placeholder|>", "<|image_pad|>"), add_special_tokens=False)["input_ids"]


# --- the tiny model ----------------------------------------------------------------------------------------------


def test_the_tiny_model_is_a_real_qwen3_vl_with_the_official_template(tiny_qwen3_vl):
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(tiny_qwen3_vl)
    assert (config.model_type, config.architectures) == ("qwen3_vl", ["Qwen3VLForConditionalGeneration"])
    template = AutoTokenizer.from_pretrained(tiny_qwen3_vl).chat_template
    assert len(template.encode()) == 5292  # Qwen/Qwen3-VL-8B-Instruct's chat_template, byte for byte
    assert (
        hashlib.sha256(template.encode()).hexdigest()
        == "3636d0f0bd6bef02654cdffdc447b79cb2cef8ab02cc75267345946291a489e4"
    )
    assert config.vision_config.patch_size == 16 and config.text_config.rope_parameters["mrope_interleaved"] is True


# --- token layout --------------------------------------------------------------------------------------------------


def test_image_and_video_ids_equal_the_inference_rendering(tiny_qwen3_vl, demo_dir, tmp_path):
    data_dir = data_dir_with(tmp_path, demo_dir, [IMAGE_RECORD, VIDEO_RECORD])
    data, tok, cfg = prepare(tiny_qwen3_vl, data_dir, tmp_path)
    assert len(data.train) == 2 and data.reports[0].invalid == 0
    for row, record in zip(data.train, [IMAGE_RECORD, VIDEO_RECORD]):
        want = official_ids(tiny_qwen3_vl, record, data_dir, cfg)
        assert tok.decode(want[len(row["input_ids"]) :]) == "\n"  # training stops at <|im_end|>
        assert row["input_ids"] == want[:-1]
        reply = tok(record["messages"][1]["content"] + "<|im_end|>", add_special_tokens=False)["input_ids"]
        assert [t for t in row["labels"] if t != -100] == reply
    assert not tok.decode(data.train[0]["input_ids"]).startswith("<|im_start|>system")  # no default system prompt
    # 1.jpg (300x168) into 64x64 pixels -> 64x32 -> 2x4 patches of 16 -> 2 tokens; 2.avi (320x240, 29.92 fps): frames
    # 0, 89, 179, 269 of 73x55 -> 64x64 -> 2 temporal patches of 4x4 -> 4 tokens each, at (0 + 2.97) / 2 = 1.5 s and
    # (5.98 + 8.99) / 2 = 7.5 s
    assert data.train[0]["input_ids"].count(tok.convert_tokens_to_ids("<|image_pad|>")) == 2
    video = tok.decode(data.train[1]["input_ids"])
    assert video.count("<|video_pad|>") == 8 and video.count("<|vision_start|>") == 2
    assert video.startswith(
        "<|im_start|>user\n<1.5 seconds><|vision_start|>" + "<|video_pad|>" * 4 + "<|vision_end|>"
        "<7.5 seconds><|vision_start|>"
    )


def test_the_thinking_template_adds_the_empty_think_block(tiny_qwen3_vl, demo_dir, tmp_path):
    data_dir = data_dir_with(tmp_path, demo_dir, [IMAGE_RECORD])
    data, tok, _ = prepare(tiny_qwen3_vl, data_dir, tmp_path, template="qwen3_vl")
    text = tok.decode(data.train[0]["input_ids"])
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nKane.<|im_end|>")


# --- what trains ---------------------------------------------------------------------------------------------------


def _numel(model, prefixes=None, trainable=True) -> int:
    return sum(
        p.numel()
        for n, p in model.named_parameters()
        if p.requires_grad == trainable and (prefixes is None or n.startswith(prefixes))
    )


def test_freeze_options_and_lora_targets_follow_the_three_parts(tiny_qwen3_vl, tmp_path):
    from tunekit.model.loader import load_model, load_tokenizer

    vision = (
        "model.visual.patch_embed.",
        "model.visual.pos_embed.",
        "model.visual.blocks.",
        "model.visual.deepstack_merger_list.",
    )
    counts = {"vision": 49184 + 2048 + 17088 + 25024, "projector": 24832, "language": 242048 + 118784}
    cases = {
        (): counts["language"],
        (("freeze_vision_tower", False),): counts["language"] + counts["vision"],
        (("freeze_multi_modal_projector", False), ("freeze_language_model", True)): counts["projector"],
    }
    for opts, trainable in cases.items():
        cfg = cfg_for(tiny_qwen3_vl, tmp_path, tmp_path, finetuning_type="full", **dict(opts))
        model = load_model(cfg, load_tokenizer(cfg))
        assert _numel(model) == trainable and _numel(model) + _numel(model, trainable=False) == 479008
        if opts == (("freeze_vision_tower", False),):
            assert _numel(model, vision) == counts["vision"] and _numel(model, ("model.visual.merger.",)) == 0

    def adapted(**opts):
        cfg = cfg_for(tiny_qwen3_vl, tmp_path, tmp_path, finetuning_type="lora", **opts)
        model = load_model(cfg, load_tokenizer(cfg))
        return sorted(
            {
                n.split(".lora_A")[0].replace("base_model.model.", "")
                for n, _ in model.named_parameters()
                if ".lora_A" in n
            }
        )

    lm = [
        f"model.language_model.layers.{i}.{m}"
        for i in range(2)
        for m in (
            "mlp.down_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "self_attn.k_proj",
            "self_attn.o_proj",
            "self_attn.q_proj",
            "self_attn.v_proj",
        )
    ]
    tower = [
        f"model.visual.blocks.{i}.{m}"
        for i in range(2)
        for m in ("attn.proj", "attn.qkv", "mlp.linear_fc1", "mlp.linear_fc2")
    ]
    tower += ["model.visual.deepstack_merger_list.0.linear_fc1", "model.visual.deepstack_merger_list.0.linear_fc2"]
    assert adapted() == sorted(lm)
    assert adapted(freeze_vision_tower=False) == sorted(lm + tower)
    assert adapted(freeze_multi_modal_projector=False, freeze_language_model=True) == [
        "model.visual.merger.linear_fc1",
        "model.visual.merger.linear_fc2",
    ]


# --- end to end ----------------------------------------------------------------------------------------------------


def test_sft_lora_on_images_and_video_trains_and_reloads_in_plain_peft(tiny_qwen3_vl, demo_dir, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    from tunekit.data.collator import MultimodalCollator
    from tunekit.flow import run_train

    data_dir = data_dir_with(tmp_path, demo_dir, [IMAGE_RECORD, VIDEO_RECORD])
    cfg = cfg_for(
        tiny_qwen3_vl,
        data_dir,
        tmp_path,
        do_train=True,
        finetuning_type="lora",
        per_device_train_batch_size=2,
        max_steps=6,
        learning_rate=2e-2,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        gradient_checkpointing=False,
        lora_rank=8,
    )
    run_train(cfg)
    out = tmp_path / "out"
    losses = logged_losses(out)
    assert len(losses) == 6 and losses[-1] < losses[0] - 0.5, losses  # ln(vocab) ~ 7.5 at the start

    data, tok, _ = prepare(tiny_qwen3_vl, data_dir, tmp_path)
    batch = MultimodalCollator(pad_token_id=tok.pad_token_id, mm=data.mm)([data.train[0], data.train[1]])
    assert batch["video_grid_thw"].tolist() == [[2, 4, 4]] and batch["image_grid_thw"].tolist() == [[1, 2, 4]]
    base = AutoModelForImageTextToText.from_pretrained(tiny_qwen3_vl)
    with torch.no_grad():
        before = base(**batch).loss.item()
        model = PeftModel.from_pretrained(base, out)
        after = model(**batch).loss.item()
    assert {n for n, _ in model.named_parameters() if "lora_A" in n} and after < before - 0.5, (before, after)


def test_chat_with_an_image_generates_what_plain_transformers_generates(tiny_qwen3_vl, demo_dir, tmp_path):
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from tunekit.config import load_config
    from tunekit.infer.engine import ChatEngine

    image = str(demo_dir / "mllm_demo_data" / "1.jpg")
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(tiny_qwen3_vl),
            "template": "qwen3_vl_nothink",
            "max_new_tokens": 6,
            "do_sample": False,
            **OPTS,
        },
    )
    engine = ChatEngine(cfg)
    ids, media = engine.render_media([{"role": "user", "content": "Who is this?"}], [image])
    record = {"messages": [{"role": "user", "content": "<image>Who is this?"}], "images": ["mllm_demo_data/1.jpg"]}
    want = official_ids(tiny_qwen3_vl, record, demo_dir, cfg)
    assert ids == want + engine.tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    (reply,) = engine.chat([{"role": "user", "content": "Who is this?"}], images=[image])
    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen3_vl).eval()
    pixels = Qwen2VLImageProcessorPil.from_pretrained(tiny_qwen3_vl)(
        images=[Image.open(image).convert("RGB")],
        size={"shortest_edge": cfg.image_min_pixels, "longest_edge": cfg.image_max_pixels},
        return_tensors="pt",
    )
    inputs = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(
            input_ids=inputs,
            attention_mask=torch.ones_like(inputs),
            pixel_values=pixels["pixel_values"],
            image_grid_thw=pixels["image_grid_thw"],
            mm_token_type_ids=media["mm_token_type_ids"],
            max_new_tokens=6,
            do_sample=False,
            eos_token_id=engine.stop_ids,
            pad_token_id=engine.pad_id,
        )
    assert reply.text == engine.decode(out[0, inputs.shape[1] :].tolist()) and reply.completion_tokens > 0
