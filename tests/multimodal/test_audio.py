"""Audio fine-tuning with Qwen2-Audio: PyAV decoding, the processor's token rule, a tiny model trains.

The inference reference is transformers' own ``Qwen2AudioProcessor`` (it needs no torchvision): its chat template
rendered with the conversation's audio parts, then ``processor(text=..., audio=...)`` expanding each
``<|AUDIO|>`` by its rule on the ``WhisperFeatureExtractor`` mask; the audio arrays given to it are decoded
here independently (PyAV, channels averaged, resampled by libswresample).
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


@pytest.fixture(scope="module")
def demo_dir(demo_dir) -> Path:
    """conftest's demo folder, with its audio demo and PyAV to decode it."""
    if not (demo_dir / "mllm_audio_demo.json").is_file():
        pytest.skip(f"reference data not found at {demo_dir}")
    pytest.importorskip("av")
    return demo_dir


@pytest.fixture(scope="module")
def tiny_qwen2_audio(tmp_path_factory) -> Path:
    from tunekit.cli.tiny_model_cmd import main as tiny_model

    out = tmp_path_factory.mktemp("tiny-qwen2-audio") / "model"
    assert tiny_model([str(out), "--like", "qwen2-audio"]) == 0
    return out


def audio_data(tmp_path: Path, demo_dir: Path) -> Path:
    """The demo file unchanged, registered as 'toy' with its audios column (paths relative to media_dir)."""
    data = tmp_path / "data"
    data.mkdir(parents=True, exist_ok=True)
    shutil.copy(demo_dir / "mllm_audio_demo.json", data / "a.json")
    info = {
        "toy": {
            "file_name": "a.json",
            "formatting": "sharegpt",
            "tags": TAGS,
            "columns": {"messages": "messages", "audios": "audios"},
        }
    }
    (data / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    return data


def cfg_for(model, data_dir, tmp_path, **opts):
    from tunekit.config import load_config

    base = {
        "model_name_or_path": str(model),
        "template": "qwen2_audio",
        "dataset": "toy",
        "dataset_dir": str(data_dir),
        "media_dir": str(DEMO_DIR),
        "output_dir": str(tmp_path / "out"),
        "stage": "sft",
        "cutoff_len": 1024,
        "report_to": "none",
    }
    return load_config(None, {**base, **opts})


def prepare(model, data_dir, tmp_path, **opts):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    cfg = cfg_for(model, data_dir, tmp_path, **opts)
    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok, "sft"), tok, cfg


def decode_mono_16k(path: str):
    import av
    import numpy as np

    with av.open(path) as c:
        resampler = av.AudioResampler(format="fltp", rate=16000)
        chunks = [g.to_ndarray() for f in c.decode(c.streams.audio[0]) for g in resampler.resample(f)]
        chunks += [g.to_ndarray() for g in resampler.resample(None)]
    return np.concatenate(chunks, axis=1).mean(axis=0)


def test_audio_files_decode_to_mono_at_the_sampling_rate(demo_dir):
    import numpy as np

    from tunekit.data.mm_plugins.audio import read_audio

    lengths = {}
    for name in ("1.mp3", "2.wav", "3.flac", "4.mp3"):
        audio = read_audio(str(demo_dir / "mllm_demo_data" / name), "r", 16000)
        assert audio.dtype == np.float32 and audio.ndim == 1  # float samples (mp3 decoding may overshoot 1.0)
        lengths[name] = audio.shape[0]
    # 1.mp3: 4.032 s stereo 48 kHz; 2.wav: 46421 samples mono 16 kHz (passed through);
    # 3.flac 93680; 4.mp3 5.0 s 44.1 kHz
    assert lengths["2.wav"] == 46421 and lengths["3.flac"] == 93680
    assert abs(lengths["1.mp3"] - 64512) <= 16 and abs(lengths["4.mp3"] - 80000) <= 1200  # mp3 decoder padding
    wav = read_audio(str(demo_dir / "mllm_demo_data" / "2.wav"), "r", 16000)
    import av

    with av.open(str(demo_dir / "mllm_demo_data" / "2.wav")) as c:  # s16 samples / 32768, untouched by the resampler
        raw = np.concatenate([f.to_ndarray() for f in c.decode(c.streams.audio[0])], axis=1)[0] / 32768.0
    np.testing.assert_allclose(wav, raw, rtol=0, atol=1e-7)


def test_the_audio_demo_loads_unchanged_and_its_ids_equal_the_processors(tiny_qwen2_audio, demo_dir, tmp_path):
    from transformers import AutoTokenizer, Qwen2AudioProcessor, WhisperFeatureExtractor

    data, tok, cfg = prepare(tiny_qwen2_audio, audio_data(tmp_path, demo_dir), tmp_path)
    assert len(data.train) == 3 and data.reports[0].invalid == 0 and data.reports[0].dropped == 0
    processor = Qwen2AudioProcessor(
        feature_extractor=WhisperFeatureExtractor.from_pretrained(tiny_qwen2_audio),
        tokenizer=AutoTokenizer.from_pretrained(tiny_qwen2_audio),
    )
    records = json.loads((demo_dir / "mllm_audio_demo.json").read_text(encoding="utf-8"))
    counts = []
    for row, record in zip(data.train, records):
        path = demo_dir / record["audios"][0]
        assert row["audios"] == [str(path.resolve())]
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
        want = processor(text=[text], audio=[decode_mono_16k(str(path))], sampling_rate=16000)["input_ids"][0]
        assert tok.decode(want[len(row["input_ids"]) :]) == "\n"  # training stops at the last <|im_end|>
        assert row["input_ids"] == want[:-1]
        counts.append(row["input_ids"].count(tok.convert_tokens_to_ids("<|AUDIO|>")))
        reply = tok(record["messages"][1]["content"] + "<|im_end|>", add_special_tokens=False)["input_ids"]
        assert [t for t in row["labels"] if t != -100] == reply  # never the audio tokens
    # frames L = samples / 160 (+1); n = ((L - 1) // 2 + 1 - 2) // 2 + 1: 4.03 s -> 101, 2.90 s -> 73, 5.86 s -> 146
    assert counts == [101, 73, 146]


def test_a_corrupt_audio_file_is_named(tiny_qwen2_audio, demo_dir, tmp_path):
    from tunekit.errors import DataError

    data = audio_data(tmp_path, demo_dir)
    shutil.copytree(demo_dir / "mllm_demo_data", data / "mllm_demo_data")
    (data / "mllm_demo_data" / "2.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk")
    with pytest.raises(DataError) as err:
        prepare(tiny_qwen2_audio, data, tmp_path, media_dir=str(data))
    assert str(err.value).startswith(
        f"{data / 'a.json'}, record 1: audio {data / 'mllm_demo_data' / '2.wav'} cannot be read ("
    )


def test_a_tiny_qwen2_audio_trains_on_the_demo(tiny_qwen2_audio, demo_dir, tmp_path):
    from tunekit.data.collator import MultimodalCollator
    from tunekit.flow import run_train
    from tunekit.model.loader import load_model, load_tokenizer

    data_dir = audio_data(tmp_path, demo_dir)
    data, tok, cfg = prepare(tiny_qwen2_audio, data_dir, tmp_path)
    batch = MultimodalCollator(pad_token_id=tok.pad_token_id, mm=data.mm)([data.train[0], data.train[1]])
    assert tuple(batch["input_features"].shape) == (2, 128, 3000)
    assert batch["feature_attention_mask"].sum(-1).tolist() == [404, 291]

    lora = cfg_for(tiny_qwen2_audio, data_dir, tmp_path, finetuning_type="lora")
    model = load_model(lora, load_tokenizer(lora))
    adapted = {
        n.split(".lora_A")[0].replace("base_model.model.", "") for n, _ in model.named_parameters() if ".lora_A" in n
    }
    assert adapted and all(n.startswith("model.language_model.layers.") for n in adapted)  # not the audio tower

    cfg = cfg_for(
        tiny_qwen2_audio,
        data_dir,
        tmp_path,
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
