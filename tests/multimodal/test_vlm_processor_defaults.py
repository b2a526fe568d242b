"""A vision-language / audio model's own processor settings are the default.

Each tiny model's folder gets processor limits that differ from both the tiny builder's and tunekit's old option
defaults (Qwen-VL: ``min_pixels`` / ``max_pixels``; Qwen2-Audio: the feature extractor's ``sampling_rate``). With no
media option set, training ids, labels and media-token counts must equal what the folder's own processor gives at
inference: ``processor.apply_chat_template`` where transformers builds the processor without torchvision (LLaVA,
LLaVA-NeXT, Gemma 3, Idefics3, Qwen2-Audio), else the official chat template with each media token expanded by the
folder's image processor called with its saved settings (Qwen2-VL's processor rule; ``Qwen2VLProcessor`` needs
torchvision). An option that is set overrides the folder: the run says so once and ``tunekit_config.yaml`` records it;
the exported folder carries the settings training used, so ``tunekit chat`` on it expands images as training did.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from tests.helpers import content_parts

QWEN = {"qwen2_vl": "qwen2-vl", "qwen2_5_vl": "qwen2.5-vl", "qwen3_vl": "qwen3-vl"}  # model_type -> tiny --like
TEMPLATE = {
    "qwen2_vl": "qwen2_vl",
    "qwen2_5_vl": "qwen2_vl",
    "qwen3_vl": "qwen3_vl_nothink",
    "llava": "llava",
    "llava_next": "llava_next",
    "gemma3": "gemma3",
    "idefics3": "smolvlm",
    "qwen2_audio": "qwen2_audio",
}
LIKE = {
    **QWEN,
    "llava": "llava",
    "llava_next": "llava-next",
    "gemma3": "gemma3",
    "idefics3": "idefics3",
    "qwen2_audio": "qwen2-audio",
}
#: the folder's image limits (min, max pixels): neither the tiny builder's nor tunekit's old defaults (1024, 768²)
LIMITS = {
    "qwen2_vl": (28 * 28 * 4, 28 * 28 * 36),
    "qwen2_5_vl": (28 * 28 * 8, 28 * 28 * 20),
    "qwen3_vl": (32 * 32 * 2, 32 * 32 * 24),
}
AUDIO_RATE = 24000  # the tiny Qwen2-Audio folder's feature extractor rate (tunekit's old default was 16000)


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """model_type -> a tiny model folder whose processor settings differ from the defaults (built on first use)."""
    from tunekit.tiny.vlm import build_tiny_vlm

    root, built = tmp_path_factory.mktemp("processor-defaults"), {}

    def get(kind: str) -> Path:
        if kind not in built:
            out = build_tiny_vlm(root / kind, like=LIKE[kind], seed=0)
            pre = out / "preprocessor_config.json"
            if kind == "qwen2_5_vl":  # the keys released Qwen2-VL / Qwen2.5-VL checkpoints write
                _edit_json(pre, size=None, min_pixels=LIMITS[kind][0], max_pixels=LIMITS[kind][1])
            elif kind in LIMITS:
                _edit_json(pre, size={"shortest_edge": LIMITS[kind][0], "longest_edge": LIMITS[kind][1]})
            elif kind == "qwen2_audio":
                _edit_json(pre, sampling_rate=AUDIO_RATE, n_samples=30 * AUDIO_RATE)
            built[kind] = out
        return built[kind]

    return get


def _cfg(model: Path, kind: str, data_dir: Path, tmp_path: Path, dataset: str, **opts):
    from tunekit.config import load_config

    base = {
        "model_name_or_path": str(model),
        "template": TEMPLATE[kind],
        "dataset": dataset,
        "dataset_dir": str(data_dir),
        "output_dir": str(tmp_path / "out"),
        "stage": "sft",
        "cutoff_len": 4096,
        "report_to": "none",
    }
    return load_config(None, {**base, **opts})


def _prepare(cfg):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok, "sft"), tok


def _qwen_reference(model: Path, messages, images) -> list[int]:
    """The official template's whole conversation, each ``<|image_pad|>`` expanded to grid / merge² copies from the
    folder's image processor as saved (``Qwen2VLProcessor``'s rule)."""
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tok = AutoTokenizer.from_pretrained(model)
    parts = [
        {
            "role": m["role"],
            "content": [{"type": p["type"], **({"text": p["text"]} if "text" in p else {})} for p in m["content"]],
        }
        for m in content_parts(messages, images)
    ]
    text = tok.apply_chat_template(parts, tokenize=False)
    processor = Qwen2VLImageProcessorPil.from_pretrained(model)
    grids = processor(images=images, return_tensors="pt")["image_grid_thw"] if images else []
    chunks = text.split("<|image_pad|>")
    assert len(chunks) == len(images) + 1
    merge = processor.merge_size**2
    text = chunks[0] + "".join("<|image_pad|>" * (int(g.prod()) // merge) + rest for g, rest in zip(grids, chunks[1:]))
    return tok(text, add_special_tokens=False)["input_ids"]


def _demo_images(demo_dir: Path, record: dict):
    from PIL import Image

    return [Image.open(demo_dir / p).convert("RGB") for p in record["images"]]


@pytest.mark.parametrize("kind", sorted(QWEN))
def test_qwen_vl_images_follow_the_folders_pixel_limits(kind, folders, demo_dir, tmp_path):
    """mllm_demo with no image option: the folder's min/max pixels, not tunekit's, decide every image's tokens."""
    model = folders(kind)
    data, tok = _prepare(_cfg(model, kind, demo_dir, tmp_path, "mllm_demo"))
    assert len(data.train) == 6 and data.reports[0].invalid == 0 and data.reports[0].dropped == 0
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    raw = json.loads((demo_dir / "mllm_demo.json").read_text(encoding="utf-8"))
    counts = []
    for record, row in zip(raw, data.train):
        ids, labels, msgs = row["input_ids"], row["labels"], record["messages"]
        want = _qwen_reference(model, msgs, _demo_images(demo_dir, record))
        # the official template ends with "<|im_end|>\n"; training stops at <|im_end|> (docs/architecture.md)
        assert ids == want[:-1] and tok.decode(want[-1:]) == "\n"
        replies = [m["content"] for m in msgs if m["role"] == "assistant"]
        trained = [t for t, label in zip(ids, labels) if label != -100]
        assert tok.decode(trained) == "".join(r + "<|im_end|>" for r in replies) and pad not in labels
        counts.append(ids.count(pad))
    # tunekit's old defaults (image_min_pixels 32², image_max_pixels 768²) replaced the folder's limits: more tokens
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    processor = Qwen2VLImageProcessorPil.from_pretrained(model)
    old = [
        sum(
            int(g.prod()) // processor.merge_size**2
            for g in processor(
                images=_demo_images(demo_dir, r), size={"shortest_edge": 32 * 32, "longest_edge": 768 * 768}
            )["image_grid_thw"]
        )
        for r in raw
    ]
    assert all(c < o for c, o in zip(counts, old)), (counts, old)


def _processor_reference(processor, kind: str, messages, images) -> list[int]:
    """What the family's processor gives the conversation at inference (official template, tokenize=True). LLaVA's
    official template writes replies without ``</s>``, so its turns are the generation prompts + `` reply</s>``."""

    def rendered(msgs, imgs, gen):
        out = processor.apply_chat_template(
            content_parts(msgs, imgs), add_generation_prompt=gen, tokenize=True, return_dict=True, return_tensors="pt"
        )
        return out["input_ids"][0].tolist()

    if kind not in ("llava", "llava_next"):
        return rendered(messages, images, False)
    tok, want, used = processor.tokenizer, [], 0
    for k, (user, reply) in enumerate(zip(messages[0::2], messages[1::2])):
        n = user["content"].count("<image>")
        prompt = rendered([user], images[used : used + n], True)
        want += (prompt if k == 0 else prompt[1:]) + tok(" " + reply["content"] + "</s>", add_special_tokens=False)[
            "input_ids"
        ]
        used += n
    return want


@pytest.mark.parametrize("kind", ["gemma3", "idefics3", "llava", "llava_next"])
def test_processor_families_give_images_to_the_processor_as_they_are(kind, folders, demo_dir, tmp_path):
    """mllm_demo plus an image smaller than tunekit's old image_min_pixels (32²) and one larger than its old
    image_max_pixels (768²): with no option set no image is resized before the processor, as at inference."""
    from PIL import Image
    from transformers import AutoProcessor

    model = folders(kind)
    data_dir = tmp_path / "data"
    shutil.copytree(demo_dir, data_dir)
    Image.new("RGB", (24, 10), (200, 30, 30)).save(data_dir / "small.png")
    # 994x621 (> 768²): LLaVA-NeXT's unpadded rows follow the original aspect, int(621 * 8 / 994) = 4; scaled to 768²
    # first (the old default), 971x607 gives int(607 * 8 / 971) = 5 and more image tokens than at inference
    Image.effect_noise((994, 621), 64).convert("RGB").save(data_dir / "large.png")
    raw = json.loads((demo_dir / "mllm_demo.json").read_text(encoding="utf-8"))
    extra = [
        {
            "messages": [
                {"role": "user", "content": "<image>What is it?"},
                {"role": "assistant", "content": "A dot."},
            ],
            "images": [name],
        }
        for name in ("small.png", "large.png")
    ]
    (data_dir / "mllm_demo.json").write_text(json.dumps(raw + extra), encoding="utf-8")
    data, tok = _prepare(_cfg(model, kind, data_dir, tmp_path, "mllm_demo"))
    assert len(data.train) == 8 and data.reports[0].invalid == 0 and data.reports[0].dropped == 0
    processor = AutoProcessor.from_pretrained(model)
    media = data.mm.media_token_ids()
    for record, row in zip(raw + extra, data.train):
        ids, labels, msgs = row["input_ids"], row["labels"], record["messages"]
        images = _demo_images(data_dir, record)
        want = _processor_reference(processor, kind, msgs, images)
        if kind in ("gemma3", "idefics3"):  # the "\n" after the last end-of-turn belongs to a next prompt
            assert ids == want[:-1] and tok.decode(want[-1:]) == "\n"
        else:
            assert ids == want
        assert sum(t in media for t in ids) == sum(t in media for t in want[: len(ids)])
        assert all(label in (-100, t) for t, label in zip(ids, labels)) and not media & set(labels)
        replies = [m["content"] for m in msgs if m["role"] == "assistant"]
        assert all(r in tok.decode([t for t in labels if t != -100]) for r in replies)


@pytest.mark.filterwarnings("ignore:At least one mel filter has all zero values:UserWarning")  # the tiny extractor
def test_qwen2_audio_uses_the_feature_extractors_sampling_rate(folders, demo_dir, tmp_path):
    """mllm_audio_demo on a feature extractor at 24 kHz, audio_sampling_rate unset: the audio is read at 24 kHz and the
    ids equal ``Qwen2AudioProcessor``'s (tunekit's old 16 kHz default refused the folder)."""
    from transformers import AutoTokenizer, Qwen2AudioProcessor, WhisperFeatureExtractor

    from tunekit.data.mm_plugins.audio import read_audio

    pytest.importorskip("av")
    model = folders("qwen2_audio")
    data, tok = _prepare(_cfg(model, "qwen2_audio", demo_dir, tmp_path, "mllm_audio_demo"))
    assert len(data.train) == 3 and data.reports[0].invalid == 0 and data.reports[0].dropped == 0
    extractor = WhisperFeatureExtractor.from_pretrained(model)
    assert extractor.sampling_rate == AUDIO_RATE
    processor = Qwen2AudioProcessor(feature_extractor=extractor, tokenizer=AutoTokenizer.from_pretrained(model))
    raw = json.loads((demo_dir / "mllm_audio_demo.json").read_text(encoding="utf-8"))
    for record, row in zip(raw, data.train):
        conversation = [
            {
                "role": m["role"],
                "content": [
                    {"type": "audio", "audio_url": "x"},
                    {"type": "text", "text": m["content"][len("<audio>") :]},
                ],
            }
            if m["content"].startswith("<audio>")
            else {"role": m["role"], "content": m["content"]}
            for m in record["messages"]
        ]
        text = processor.apply_chat_template(conversation, tokenize=False)
        audio = read_audio(str(demo_dir / record["audios"][0]), "r", AUDIO_RATE)
        want = processor(text=[text], audio=[audio], sampling_rate=AUDIO_RATE)["input_ids"][0]
        assert row["input_ids"] == want[:-1] and tok.decode(want[-1:]) == "\n"
        reply = tok(record["messages"][1]["content"] + "<|im_end|>", add_special_tokens=False)["input_ids"]
        assert [t for t in row["labels"] if t != -100] == reply
    assert data.mm.sampling_rate == AUDIO_RATE


# --- an option that is set: said once, recorded, exported, and what chat uses ----------------------------------------

SET_MAX = 28 * 28 * 16  # image_max_pixels set for the run: below the folder's max_pixels (28² x 36)


def _pads(engine, image: Path) -> int:
    ids, _ = engine.render_media([{"role": "user", "content": "Who is this?"}], [str(image)])
    return ids.count(engine.tokenizer.convert_tokens_to_ids("<|image_pad|>"))


def test_a_set_option_is_said_once_recorded_exported_and_used_by_chat(folders, demo_dir, tmp_path, caplog):
    import yaml
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from tests.helpers import write_dataset
    from tunekit.config import load_config
    from tunekit.export import export_model
    from tunekit.flow import run_train
    from tunekit.infer.engine import ChatEngine

    model, image = folders("qwen2_vl"), demo_dir / "mllm_demo_data" / "1.jpg"
    data = tmp_path / "data"
    shutil.copytree(demo_dir / "mllm_demo_data", data / "mllm_demo_data")
    records = [
        {
            "messages": [
                {"role": "user", "content": "<image>Who is this?"},
                {"role": "assistant", "content": "Kane."},
            ],
            "images": ["mllm_demo_data/1.jpg"],
        }
    ] * 2
    write_dataset(
        data,
        "toy",
        records,
        {
            "formatting": "sharegpt",
            "columns": {"messages": "messages", "images": "images"},
            "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
        },
    )
    run = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="tunekit.data.mm_plugins.settings"):
        run_train(
            load_config(
                None,
                {
                    "model_name_or_path": str(model),
                    "template": "qwen2_vl",
                    "dataset": "toy",
                    "dataset_dir": str(data),
                    "output_dir": str(run),
                    "stage": "sft",
                    "cutoff_len": 1024,
                    "report_to": "none",
                    "do_train": True,
                    "finetuning_type": "lora",
                    "per_device_train_batch_size": 2,
                    "max_steps": 1,
                    "save_strategy": "no",
                    "disable_tqdm": True,
                    "gradient_checkpointing": False,
                    "image_max_pixels": SET_MAX,
                },
            )
        )
    notes = [r.getMessage() for r in caplog.records if r.name == "tunekit.data.mm_plugins.settings"]
    assert notes == [
        f"image_max_pixels: {SET_MAX} is used instead of the model processor's max_pixels "
        f"({LIMITS['qwen2_vl'][1]} in {model}); unset image_max_pixels to use the processor's."
    ]
    saved = yaml.safe_load((run / "tunekit_config.yaml").read_text(encoding="utf-8"))
    assert (saved["image_max_pixels"], saved["image_min_pixels"]) == (SET_MAX, None)  # None: the folder's

    processor = Qwen2VLImageProcessorPil.from_pretrained(model)
    from PIL import Image

    def tokens(size):
        grid = processor(images=[Image.open(image).convert("RGB")], size=size)["image_grid_thw"][0]
        return int(grid.prod()) // processor.merge_size**2

    trained = tokens({"shortest_edge": LIMITS["qwen2_vl"][0], "longest_edge": SET_MAX})
    assert trained < tokens({"shortest_edge": LIMITS["qwen2_vl"][0], "longest_edge": LIMITS["qwen2_vl"][1]})
    # the exported folder's processor holds the limits training used, and chat on it (no option) uses them
    out = export_model(
        load_config(
            None,
            {
                "model_name_or_path": str(model),
                "template": "qwen2_vl",
                "adapter_name_or_path": str(run),
                "export_dir": str(tmp_path / "merged"),
            },
        ),
        verify=False,
    )
    exported = json.loads((Path(out) / "preprocessor_config.json").read_text(encoding="utf-8"))
    assert exported["size"] == {"shortest_edge": LIMITS["qwen2_vl"][0], "longest_edge": SET_MAX}
    provenance = json.loads((Path(out) / "tunekit_export.json").read_text(encoding="utf-8"))
    assert provenance["multimodal"]["media_settings"] == {"image_max_pixels": SET_MAX}
    for cfg in (
        {"model_name_or_path": str(out)},
        {"model_name_or_path": str(model), "adapter_name_or_path": str(run)},
    ):
        engine = ChatEngine(load_config(None, {**cfg, "template": "qwen2_vl", "max_new_tokens": 2}))
        assert _pads(engine, image) == trained
    base = ChatEngine(
        load_config(None, {"model_name_or_path": str(model), "template": "qwen2_vl", "max_new_tokens": 2})
    )
    assert _pads(base, image) == tokens(
        {"shortest_edge": LIMITS["qwen2_vl"][0], "longest_edge": LIMITS["qwen2_vl"][1]}
    )


def test_the_dataset_cache_follows_the_folders_processor_settings(folders, demo_dir, tmp_path):
    """The tokenized dataset is cached by what decides it: a changed processor limit in the folder tokenizes again."""
    model = tmp_path / "model"
    shutil.copytree(folders("qwen2_vl"), model)
    pad_counts = []
    for longest in (LIMITS["qwen2_vl"][1], 28 * 28 * 8):
        _edit_json(model / "preprocessor_config.json", size={"shortest_edge": 28 * 28, "longest_edge": longest})
        data, tok = _prepare(_cfg(model, "qwen2_vl", demo_dir, tmp_path, "mllm_demo"))
        pad_counts.append(data.train[1]["input_ids"].count(tok.convert_tokens_to_ids("<|image_pad|>")))
    assert pad_counts[1] < pad_counts[0]  # 2.jpg (300x199) within 28² x 8 pixels: fewer tokens than within 28² x 36


def test_a_set_minimum_above_the_folders_maximum_names_both(folders, tmp_path):
    from tunekit.data.mm_plugins import load_plugin
    from tunekit.errors import ConfigError

    model = folders("qwen2_vl")
    cfg = _cfg(model, "qwen2_vl", tmp_path, tmp_path, "mllm_demo", image_min_pixels=LIMITS["qwen2_vl"][1] + 1)
    with pytest.raises(ConfigError) as err:
        load_plugin(cfg, "qwen2_vl")
    assert str(err.value) == (
        f"image_min_pixels {LIMITS['qwen2_vl'][1] + 1} is larger than image_max_pixels "
        f"{LIMITS['qwen2_vl'][1]} (one of them the processor's in {model}): set both, or lower "
        f"image_min_pixels / raise image_max_pixels."
    )


def test_videos_follow_the_folders_fps_and_frame_limit(folders, demo_dir, tmp_path):
    """mllm_video_demo on Qwen3-VL whose video processor samples 1 frame a second, at most 6: with no video option the
    clip has min(frames, 6, floor(seconds x 1)) frames as decoded (no per-frame resize), one time-stamped block per
    temporal patch of 2 frames."""
    import math

    av = pytest.importorskip("av")
    model = tmp_path / "model"
    shutil.copytree(folders("qwen3_vl"), model)
    _edit_json(model / "video_preprocessor_config.json", fps=1, max_frames=6)
    data, tok = _prepare(_cfg(model, "qwen3_vl", demo_dir, tmp_path, "mllm_video_demo"))
    assert len(data.train) == 3 and data.reports[0].invalid == 0 and data.reports[0].dropped == 0
    raw = json.loads((demo_dir / "mllm_video_demo.json").read_text(encoding="utf-8"))
    for record, row in zip(raw, data.train):
        path = str(demo_dir / record["videos"][0])
        with av.open(path) as container:
            s = container.streams.video[0]
            n = min(s.frames, 6, max(1, math.floor(float(s.duration * s.time_base) * 1)))
            size = (s.width, s.height)
        clip = data.mm.clip(path, "r")
        assert len(clip.indices) == n and clip.frames[0].size == size
        assert tok.decode(row["input_ids"]).count(" seconds><|vision_start|>") == math.ceil(n / 2)
