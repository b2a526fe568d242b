"""``tunekit data stats`` on multimodal data: media tokens per sample (images and videos apart) equal to the family
processor's counts, the samples whose media alone exceed cutoff_len named, and training dropping them (never cut)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import REFERENCE_DATA, write_dataset

DEMO_DIR = REFERENCE_DATA
SHAREGPT = {
    "formatting": "sharegpt",
    "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
}
SIZES = {"small.png": (56, 56), "wide.png": (300, 120), "large.png": (700, 700)}  # (width, height)


@pytest.fixture(scope="module")
def tiny_qwen2_vl(tmp_path_factory) -> Path:
    from tunekit.tiny.vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen2-vl") / "model", like="qwen2-vl", seed=0)


def _turns(question: str, answer: str) -> list[dict]:
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


def _data(tmp_path: Path) -> Path:
    from PIL import Image

    data = tmp_path / "data"
    data.mkdir()
    for name, (w, h) in SIZES.items():
        Image.new("RGB", (w, h), (w % 255, h % 255, 7)).save(data / name)
    records = [
        {"messages": _turns("<image>What is it?", "A square."), "images": ["small.png"]},
        {"messages": _turns("<image><image>Compare them.", "Both are flat."), "images": ["small.png", "wide.png"]},
        {"messages": _turns("<image>Describe it.", "A big square."), "images": ["large.png"]},
        {"messages": _turns("No picture here.", "Fine.")},
    ]
    write_dataset(data, "toy", records, {**SHAREGPT, "columns": {"messages": "messages", "images": "images"}})
    return data


def _cfg(model: Path, data: Path, tmp_path: Path, **over):
    from tunekit.config import load_config

    base = {
        "model_name_or_path": str(model),
        "template": "qwen2_vl",
        "dataset": "toy",
        "dataset_dir": str(data),
        "output_dir": str(tmp_path / "out"),
        "stage": "sft",
        "cutoff_len": 300,
        "report_to": "none",
        "image_max_pixels": 768 * 768,
        "image_min_pixels": 32 * 32,
    }  # above the tiny folder's own 224² limit
    return load_config(None, {**base, **over})


def _processor_tokens(cfg, data: Path) -> dict[str, int]:
    """Tokens per image file from the family's own image processor at the configured resolution."""
    from tunekit.data.mm_plugins import load_plugin

    plugin = load_plugin(cfg, cfg.template)
    return {name: plugin.image_token_counts([str(data / name)], name)[0] for name in SIZES}


def test_media_tokens_per_sample_and_samples_over_cutoff(tiny_qwen2_vl, tmp_path, capsys):
    from tunekit.cli.data_cmd import main
    from tunekit.data.lengths import measure_lengths
    from tunekit.model.loader import load_tokenizer
    from tunekit.plan.stats import dataset_stats

    data = _data(tmp_path)
    cfg = _cfg(tiny_qwen2_vl, data, tmp_path)
    per_file = _processor_tokens(cfg, data)
    # smart_resize to multiples of 28: 56x56 -> 4x4 patches, 300x120 -> 308x112 (22x8), 700x700 -> 50x50;
    # 4 patches a token
    assert per_file == {"small.png": 4, "wide.png": 44, "large.png": 625}
    table = measure_lengths(cfg, load_tokenizer(cfg))
    expected = [per_file["small.png"], per_file["small.png"] + per_file["wide.png"], per_file["large.png"], 0]
    assert (
        table["image_tokens"] == expected and table["images"] == [1, 2, 1, 0] and table["video_tokens"] == [0, 0, 0, 0]
    )
    stats = dataset_stats(table, cfg.cutoff_len, 1, stage="sft")["media"]
    assert stats["image"]["samples"] == 3 and stats["image"]["media"] == 4
    assert (stats["image"]["tokens"]["min"], stats["image"]["tokens"]["max"]) == (4, 625)
    assert stats["image"]["tokens"]["mean"] == round((4 + 48 + 625) / 3, 2)
    assert "video" not in stats
    over = stats["over_cutoff"]
    assert over["samples"] == 1 and over["listed"][0]["media_tokens"] == 625
    source = over["listed"][0]["source"]
    assert source == table["source"][2] and "toy" in source
    assert stats["recommended_cutoff_len"] == 640

    assert (
        main(
            [
                "stats",
                "model_name_or_path=" + str(tiny_qwen2_vl),
                "template=qwen2_vl",
                "dataset=toy",
                f"dataset_dir={data}",
                "cutoff_len=300",
                "image_max_pixels=589824",
                "image_min_pixels=1024",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "image tokens per sample (3 samples with 4 images): min 4, mean 225.7, max 625" in " ".join(text.split())
    assert "1 sample(s) whose media tokens alone exceed cutoff_len 300" in " ".join(text.split())
    assert source.replace(" ", "") in "".join(text.split())  # named (rich may wrap the long path)


def test_training_drops_the_sample_and_names_it(tiny_qwen2_vl, tmp_path):
    """What training does with it: the sample is dropped whole (never cut through its image)
    and named in the report."""
    from rich.console import Console

    from tunekit.data.pipeline import prepare_datasets
    from tunekit.data.report import print_reports
    from tunekit.model.loader import load_tokenizer

    data = _data(tmp_path)
    cfg = _cfg(tiny_qwen2_vl, data, tmp_path)
    prepared = prepare_datasets(cfg, load_tokenizer(cfg), "sft")
    report = prepared.reports[0]
    assert (report.records, report.dropped, report.truncated, report.kept) == (4, 1, 0, 3)
    assert len(report.dropped_sources) == 1 and "toy" in report.dropped_sources[0]
    console = Console(record=True, width=200)
    print_reports(prepared.reports, cfg.cutoff_len, console)
    text = " ".join(console.export_text().split())
    assert "toy: 1 sample(s) dropped (no trainable tokens left, or longer than cutoff_len 300 with media" in text
    assert report.dropped_sources[0].replace(" ", "") in "".join(text.split())


def test_videos_are_reported_apart(tiny_qwen2_vl, tmp_path):
    """The LLaMA-Factory video demo: video tokens per sample separately from image tokens."""
    if not (DEMO_DIR / "mllm_video_demo.json").is_file():
        pytest.skip(f"reference data not found at {DEMO_DIR}")
    pytest.importorskip("av")
    from tunekit.data.lengths import measure_lengths
    from tunekit.data.mm_plugins import load_plugin
    from tunekit.model.loader import load_tokenizer
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.stats import dataset_stats
    from tunekit.plan.vision import video_grid

    data = tmp_path / "data"
    shutil.copytree(DEMO_DIR / "mllm_demo_data", data / "mllm_demo_data")
    records = json.loads((DEMO_DIR / "mllm_video_demo.json").read_text(encoding="utf-8"))
    write_dataset(data, "toy", records, {**SHAREGPT, "columns": {"messages": "messages", "videos": "videos"}})
    cfg = _cfg(tiny_qwen2_vl, data, tmp_path, cutoff_len=4096, video_maxlen=8)
    table = measure_lengths(cfg, load_tokenizer(cfg))
    plugin = load_plugin(cfg, cfg.template)
    clips = [plugin.clip(str(data / r["videos"][0]), "demo") for r in records]
    expected = [plugin.video_text(c).count("<|video_pad|>") for c in clips]
    assert table["video_tokens"] == expected and table["image_tokens"] == [0] * len(records)
    shape = load_shape(str(tiny_qwen2_vl), None)  # the planner's video arithmetic gives the same tokens per clip
    assert [
        video_grid(
            shape.vision,
            len(c.indices),
            c.frames[0].height,
            c.frames[0].width,
            cfg.video_max_pixels,
            cfg.video_min_pixels,
            str(tiny_qwen2_vl),
        )[1]
        for c in clips
    ] == expected
    stats = dataset_stats(table, cfg.cutoff_len, 1, stage="sft")["media"]
    assert "image" not in stats and stats["video"]["samples"] == len(records)
    assert stats["video"]["tokens"]["max"] == max(expected) and stats["over_cutoff"]["samples"] == 0


def test_plan_reads_the_measured_media(tiny_qwen2_vl, tmp_path):
    """``tunekit plan`` with the data on disk: the sample with the most media tokens sizes the
    vision tower's patches."""
    from tunekit.plan import make_plan

    data = _data(tmp_path)
    cfg = _cfg(tiny_qwen2_vl, data, tmp_path, finetuning_type="lora", per_device_train_batch_size=2)
    plan = make_plan(cfg, gpu_memory_gib=24)
    media = plan.media
    assert media["source"].startswith("measured") and media["media_tokens_per_sample"] == 625
    assert media["patches_per_micro_batch"] == 2 * 625 * 4
    assert any("625 media tokens per sample alone exceed cutoff_len 300" in n for n in plan.notes)
