"""Video training for Qwen2-VL / Qwen2.5-VL: PyAV frames, the video processor's math without torchvision.

References: the grid and token count of a video are computed here independently of tunekit's decoding path,
from the stream's metadata only (LLaMA-Factory's ``_get_qwen_video_grid_metadata``: sample count, the frame
size after its ``_preprocess_image`` rule, then the video processor's ``smart_resize`` and
``get_num_of_video_patches``); pixel values are checked against transformers' own PIL image processor on a
still clip (two equal frames are exactly what the image processor makes of one image).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from tests.helpers import REFERENCE_DATA, logged_losses

DEMO_DIR = REFERENCE_DATA
TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}
VIDEO_OPTS = {
    "video_max_pixels": 64 * 64,
    "video_min_pixels": 16 * 16,
    "video_maxlen": 4,
    "video_fps": 2.0,
}  # small clips: 4 frames of at most 64x64 pixels


@pytest.fixture(scope="module")
def demo_dir() -> Path:
    if not (DEMO_DIR / "mllm_video_demo.json").is_file():
        pytest.skip(f"reference data not found at {DEMO_DIR}")
    pytest.importorskip("av")
    return DEMO_DIR


@pytest.fixture(scope="module")
def tiny_qwen2_vl(tmp_path_factory) -> Path:
    from tunekit.tiny.vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen2-vl-video") / "model", like="qwen2-vl", seed=0)


def video_data(tmp_path: Path, demo_dir: Path, file: str = "mllm_video_demo.json") -> Path:
    """A dataset folder with the demo file unchanged, registered as 'toy' with its videos column."""
    data = tmp_path / "data"
    data.mkdir(parents=True, exist_ok=True)
    shutil.copy(demo_dir / file, data / "v.json")
    info = {
        "toy": {
            "file_name": "v.json",
            "formatting": "sharegpt",
            "tags": TAGS,
            "columns": {"messages": "messages", "videos": "videos"},
        }
    }
    (data / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    return data


def cfg_for(model, data_dir, tmp_path, template="qwen2_vl", media_dir=None, **opts):
    from tunekit.config import load_config

    base = {
        "model_name_or_path": str(model),
        "template": template,
        "dataset": "toy",
        "dataset_dir": str(data_dir),
        "media_dir": str(media_dir) if media_dir else None,
        "output_dir": str(tmp_path / "out"),
        "stage": "sft",
        "cutoff_len": 1024,
        "report_to": "none",
        **VIDEO_OPTS,
    }
    return load_config(None, {**base, **opts})


def prepare(model, data_dir, tmp_path, **opts):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    cfg = cfg_for(model, data_dir, tmp_path, **opts)
    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok, "sft"), tok, cfg


def metadata_grid(
    path: str, fps: float, maxlen: int, max_pixels: int, min_pixels: int, spec: dict
) -> tuple[int, int, int]:
    """A video's (t, h, w) from its stream metadata alone (LLaMA-Factory's rule + the processor's formula)."""
    import av
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    with av.open(path) as c:
        s = c.streams.video[0]
        n = min(s.frames, maxlen, max(1, math.floor(float(s.duration * s.time_base) * fps)))
        width, height = s.width, s.height
    if width * height > max_pixels:
        f = math.sqrt(max_pixels / (width * height))
        width, height = int(width * f), int(height * f)
    if width * height < min_pixels:
        f = math.sqrt(min_pixels / (width * height))
        width, height = int(width * f), int(height * f)
    n += n % 2  # LLaMA-Factory repeats the last frame of an odd sample
    h, w = smart_resize(height, width, factor=spec["patch_size"] * 2, min_pixels=spec["min"], max_pixels=spec["max"])
    # Qwen2VLVideoProcessor.get_num_of_video_patches: grid_t = frames / temporal_patch_size (after padding)
    return -(-n // 2), h // spec["patch_size"], w // spec["patch_size"]


# --- the video processor's math -----------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_a_still_clip_gives_exactly_the_image_processors_patches(family):
    """Two equal frames = one image for the image processor (it repeats the image temporal_patch_size times)."""
    import numpy as np
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from tunekit.data.mm_plugins.qwen2_vl import VIDEO_DEFAULTS as QWEN2
    from tunekit.data.mm_plugins.qwen3_vl import VIDEO_DEFAULTS as QWEN3
    from tunekit.data.mm_plugins.video import VideoSpec, qwen2_resize, qwen3_resize, video_patches

    defaults, rule = (QWEN2, qwen2_resize) if family == "qwen2_vl" else (QWEN3, qwen3_resize)
    spec = VideoSpec(**{**defaults, "min_pixels": 32 * 32, "max_pixels": 2 * 256 * 256})
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (150, 230, 3), dtype=np.uint8))
    pixels, grid = video_patches([image, image], spec, rule)
    ref = Qwen2VLImageProcessorPil(
        size={"shortest_edge": spec.min_pixels, "longest_edge": spec.max_pixels},
        patch_size=spec.patch_size,
        merge_size=spec.merge_size,
        image_mean=list(spec.image_mean),
        image_std=list(spec.image_std),
    )(images=[image], return_tensors="np")
    assert (
        grid == tuple(ref["image_grid_thw"][0]) == ((1, 10, 16) if family == "qwen2_vl" else (1, 10, 14))
    )  # 150x230 -> 140x224 / 160x224
    # same float32 arithmetic on the same PIL-resized uint8 pixels: equal up to the last bit of (x/255 - mean)/std
    np.testing.assert_allclose(pixels, ref["pixel_values"], rtol=0, atol=4 * np.finfo(np.float32).eps * 8)


def test_frames_are_sampled_at_video_fps_up_to_video_maxlen(demo_dir):
    import numpy as np

    from tunekit.data.mm_plugins.video import read_clip

    path = str(demo_dir / "mllm_demo_data" / "1.mp4")  # 243 frames, 25 fps, 9.72 s, 640x360
    clip = read_clip(path, "r", fps=2.0, maxlen=128, max_pixels=256 * 256, min_pixels=16 * 16)
    assert clip.indices == list(np.linspace(0, 242, 19).astype(np.int32))  # floor(9.72 s x 2 fps) = 19 frames
    assert len(clip.frames) == 20 and clip.frames[-1] is clip.frames[-2]  # odd: the last frame repeated
    assert (clip.frames[0].width, clip.frames[0].height) == (341, 192)  # scaled into 256x256 pixels
    assert clip.average_fps == 25.0 and clip.duration == pytest.approx(9.72)
    short = read_clip(path, "r", fps=2.0, maxlen=4, max_pixels=256 * 256, min_pixels=16 * 16)
    assert short.indices == [0, 80, 161, 242] and short.sampled_fps == pytest.approx(4 / 9.72)


def test_a_corrupt_video_is_named_with_its_record(tiny_qwen2_vl, demo_dir, tmp_path):
    from tunekit.errors import ConfigError, DataError

    data = video_data(tmp_path, demo_dir)
    shutil.copytree(demo_dir / "mllm_demo_data", data / "mllm_demo_data")
    (data / "mllm_demo_data" / "2.avi").write_bytes(b"RIFF\x00\x00\x00\x00AVI garbage")
    with pytest.raises((DataError, ConfigError)) as err:
        prepare(tiny_qwen2_vl, data, tmp_path)
    assert str(err.value).startswith(
        f"{data / 'v.json'}, record 1: video {data / 'mllm_demo_data' / '2.avi'} cannot be read ("
    )
    assert "the file is corrupt or not a video. Replace it, or remove the record." in str(err.value)


# --- data: demo file, token layout ----------------------------------------------------------------------------


def test_the_video_demo_loads_unchanged_and_its_ids_equal_the_inference_rendering(tiny_qwen2_vl, demo_dir, tmp_path):
    from transformers import AutoTokenizer

    data, tok, cfg = prepare(tiny_qwen2_vl, video_data(tmp_path, demo_dir), tmp_path, media_dir=demo_dir)
    assert len(data.train) == 3 and data.reports[0].invalid == 0 and data.reports[0].dropped == 0
    records = json.loads((demo_dir / "mllm_video_demo.json").read_text(encoding="utf-8"))
    official = AutoTokenizer.from_pretrained(tiny_qwen2_vl)
    pre = json.loads((tiny_qwen2_vl / "preprocessor_config.json").read_text(encoding="utf-8"))
    spec = {"patch_size": 14, "min": pre["size"]["shortest_edge"], "max": pre["size"]["longest_edge"]}
    pad = official.convert_tokens_to_ids("<|video_pad|>")
    grids = []
    for row, record in zip(data.train, records):
        path = str(demo_dir / record["videos"][0])
        assert row["videos"] == [str(Path(path).resolve())]
        grid = metadata_grid(path, cfg.video_fps, cfg.video_maxlen, cfg.video_max_pixels, cfg.video_min_pixels, spec)
        grids.append(grid)
        conversation = [
            {"role": m["role"], "content": [{"type": "video"}, {"type": "text", "text": m["content"][7:]}]}
            if m["content"].startswith("<video>")
            else {"role": m["role"], "content": m["content"]}
            for m in record["messages"]
        ]
        text = official.apply_chat_template(conversation, tokenize=False)
        text = text.replace("<|video_pad|>", "<|video_pad|>" * (grid[0] * grid[1] * grid[2] // 4))
        want = official(text, add_special_tokens=False)["input_ids"]
        # the official template ends with "<|im_end|>\n"; training stops at <|im_end|> (docs/architecture.md)
        assert official.decode(want[len(row["input_ids"]) :]) == "\n" and row["input_ids"] == want[:-1]
        assert row["input_ids"].count(pad) == grid[0] * grid[1] * grid[2] // 4
        reply = official(record["messages"][1]["content"] + "<|im_end|>", add_special_tokens=False)["input_ids"]
        assert [t for t in row["labels"] if t != -100] == reply  # only the answer is trained, never video tokens
    assert grids == [
        (2, 4, 6),
        (2, 4, 6),
        (2, 4, 6),
    ]  # 4 frames; 85x48 / 73x55 / 85x47 -> 56x84 pixels at 28-pixel steps


# --- training --------------------------------------------------------------------------------------------------


def test_a_tiny_qwen2_vl_trains_on_the_video_demo_with_the_models_3d_rope(tiny_qwen2_vl, demo_dir, tmp_path):
    import torch
    from transformers import AutoModelForImageTextToText

    from tunekit.data.collator import MultimodalCollator
    from tunekit.flow import run_train

    data_dir = video_data(tmp_path, demo_dir)
    data, tok, _ = prepare(tiny_qwen2_vl, data_dir, tmp_path, media_dir=demo_dir)
    batch = MultimodalCollator(pad_token_id=tok.pad_token_id, mm=data.mm)([data.train[0], data.train[1]])
    assert batch["video_grid_thw"].tolist() == [[2, 4, 6], [2, 4, 6]]
    assert tuple(batch["pixel_values_videos"].shape) == (2 * 48, 3 * 2 * 14 * 14)
    assert (batch["mm_token_type_ids"] == 2).sum(1).tolist() == [12, 12]
    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen2_vl)
    positions, _ = model.model.get_rope_index(
        batch["input_ids"],
        batch["mm_token_type_ids"],
        video_grid_thw=batch["video_grid_thw"],
        attention_mask=batch["attention_mask"],
    )
    row = batch["mm_token_type_ids"][0] == 2
    start = int(row.nonzero()[0])
    t, h, w = (positions[k, 0, row] - start for k in range(3))
    assert t.tolist() == [0] * 6 + [1] * 6  # grid 2 x (4/2) x (6/2): 3-D positions, not a 1-D run
    assert h.tolist() == [0, 0, 0, 1, 1, 1] * 2 and w.tolist() == [0, 1, 2] * 2 * 2
    assert int(positions[0, 0, start + 12]) == start + 3  # the text after the video continues at max + 1

    cfg = cfg_for(
        tiny_qwen2_vl,
        data_dir,
        tmp_path,
        media_dir=demo_dir,
        do_train=True,
        finetuning_type="lora",
        per_device_train_batch_size=2,
        max_steps=2,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        gradient_checkpointing=False,
    )
    run_train(cfg)
    losses = logged_losses(tmp_path / "out")
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert torch.isfinite(torch.tensor(losses)).all()


def test_qwen2_5_vl_gets_seconds_per_grid_from_the_sampled_rate(demo_dir, tmp_path):
    import torch
    from transformers import AutoModelForImageTextToText

    from tunekit.data.collator import MultimodalCollator
    from tunekit.tiny.vlm import build_tiny_vlm

    model_dir = build_tiny_vlm(tmp_path / "q25", like="qwen2.5-vl", seed=0)
    data, tok, _ = prepare(model_dir, video_data(tmp_path, demo_dir), tmp_path, media_dir=demo_dir)
    batch = MultimodalCollator(pad_token_id=tok.pad_token_id, mm=data.mm)([data.train[0]])
    # temporal_patch_size / (4 sampled frames / 9.72 s), LLaMA-Factory's fps_per_video
    assert batch["second_per_grid_ts"].tolist() == pytest.approx([2 / (4 / 9.72)])
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    with torch.no_grad():
        out = model(**batch)
    assert torch.isfinite(out.loss)


def test_use_audio_in_video_without_an_audio_visual_family_is_an_error(tiny_qwen2_vl, demo_dir, tmp_path):
    from tunekit.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        prepare(tiny_qwen2_vl, video_data(tmp_path, demo_dir), tmp_path, media_dir=demo_dir, use_audio_in_video=True)
    assert str(err.value) == (
        "use_audio_in_video is true, but the qwen2_vl family reads no audio track from videos (its "
        "videos are frames only): set use_audio_in_video: false (tunekit has no audio-visual family "
        "such as Qwen2.5-Omni yet)."
    )


def test_the_video_spec_reads_the_checkpoints_own_config(tmp_path):
    from tunekit.data.mm_plugins.qwen2_vl import VIDEO_DEFAULTS as QWEN2
    from tunekit.data.mm_plugins.qwen3_vl import VIDEO_DEFAULTS as QWEN3
    from tunekit.data.mm_plugins.video import VideoSpec

    assert VideoSpec.load(str(tmp_path), QWEN2) == VideoSpec(**QWEN2)  # no config: Qwen2VLVideoProcessor's defaults
    # Qwen/Qwen2-VL-7B-Instruct's preprocessor_config.json (the video processor falls back to it)
    (tmp_path / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "min_pixels": 3136,
                "max_pixels": 12845056,
                "patch_size": 14,
                "temporal_patch_size": 2,
                "merge_size": 2,
                "image_mean": [0.48145466, 0.4578275, 0.40821073],
                "image_std": [0.26862954, 0.26130258, 0.27577711],
            }
        )
    )
    assert (VideoSpec.load(str(tmp_path), QWEN2).min_pixels, VideoSpec.load(str(tmp_path), QWEN2).max_pixels) == (
        3136,
        12845056,
    )
    # Qwen/Qwen3-VL-8B-Instruct's video_preprocessor_config.json wins over preprocessor_config.json
    (tmp_path / "video_preprocessor_config.json").write_text(
        json.dumps(
            {
                "size": {"longest_edge": 25165824, "shortest_edge": 4096},
                "patch_size": 16,
                "temporal_patch_size": 2,
                "merge_size": 2,
                "image_mean": [0.5, 0.5, 0.5],
                "image_std": [0.5, 0.5, 0.5],
            }
        )
    )
    spec = VideoSpec.load(str(tmp_path), QWEN3)
    assert (spec.min_pixels, spec.max_pixels, spec.patch_size, spec.image_mean) == (
        4096,
        25165824,
        16,
        (0.5, 0.5, 0.5),
    )
