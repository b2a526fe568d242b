"""Vision-language fine-tuning, first family Qwen2-VL / Qwen2.5-VL on tiny random models.

The reference for token layout is the model's own chat template (Qwen2-VL-7B-Instruct's, saved in the tiny
model's tokenizer) rendered by transformers, with each ``<|image_pad|>`` expanded to
``image_grid_thw.prod() // merge_size**2`` copies from the model's own image processor: that is exactly
what ``Qwen2VLProcessor.__call__`` does (``replace_image_token``); the processor class itself cannot be
built without torchvision in transformers 5.24 (see ``tunekit.tiny.qwen2_vl``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import logged_losses, write_dataset

SHAREGPT_OPENAI = {
    "formatting": "sharegpt",
    "columns": {"messages": "messages", "images": "images"},
    "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
}
SMALL = 28 * 28 * 16  # image_max_pixels of the fast tests: 1.jpg (300x168) -> grid 1x4x10 -> 10 image tokens


@pytest.fixture(scope="session")
def tiny_qwen2_vl(tmp_path_factory) -> Path:
    from tunekit.tiny.vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen2-vl") / "model", like="qwen2-vl", seed=0)


def _cfg(model, data_dir, tmp_path, **opts):
    from tunekit.config import load_config

    base = {
        "model_name_or_path": str(model),
        "template": "qwen2_vl",
        "dataset": "toy",
        "dataset_dir": str(data_dir),
        "output_dir": str(tmp_path / "out"),
        "stage": "sft",
        "cutoff_len": 1024,
        "image_max_pixels": SMALL,
        "report_to": "none",
    }
    return load_config(None, {**base, **opts})


def _prepare(model, data_dir, tmp_path, **opts):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    cfg = _cfg(model, data_dir, tmp_path, **opts)
    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok, "sft"), tok, cfg


def _media_data(tmp_path, demo_dir, records) -> Path:
    data = tmp_path / "data"
    data.mkdir(parents=True, exist_ok=True)
    shutil.copytree(demo_dir / "mllm_demo_data", data / "mllm_demo_data", dirs_exist_ok=True)
    write_dataset(data, "toy", records, SHAREGPT_OPENAI)
    return data


def _official_ids(model: Path, messages: list[dict], image_paths: list[str], max_pixels: int) -> list[int]:
    """The inference token ids of a conversation: official chat template + the processor's image-token expansion."""
    from PIL import Image
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tok = AutoTokenizer.from_pretrained(model)
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(model)
    conversation = []
    for m in messages:
        parts = []
        for k, piece in enumerate(m["content"].split("<image>")):
            if k:
                parts.append({"type": "image"})
            if piece:
                parts.append({"type": "text", "text": piece})
        conversation.append({"role": m["role"], "content": parts})
    text = tok.apply_chat_template(conversation, tokenize=False)
    images = [Image.open(p).convert("RGB") for p in image_paths]
    grids = image_processor(
        images=images, size={"shortest_edge": 32 * 32, "longest_edge": max_pixels}, return_tensors="pt"
    )["image_grid_thw"]
    chunks = text.split("<|image_pad|>")
    assert len(chunks) == len(images) + 1
    expanded = chunks[0] + "".join("<|image_pad|>" * (int(g.prod()) // 4) + rest for g, rest in zip(grids, chunks[1:]))
    return tok(expanded, add_special_tokens=False)["input_ids"]


# --- data -------------------------------------------------------------------------------------------------------


def test_the_llamafactory_demo_files_load_unchanged(demo_dir):
    from tunekit.data.dataset_info import resolve_datasets
    from tunekit.data.formats import convert_record
    from tunekit.data.readers import read_records

    got = {}
    for name in ("mllm_demo", "mllm_video_demo", "mllm_audio_demo", "mllm_video_audio_demo"):
        (attr,) = resolve_datasets([name], demo_dir)
        samples = [convert_record(r, attr, "sft") for r in read_records(attr, cache_dir=None, bad_records="error")]
        got[name] = [(len(s["images"]), len(s["videos"]), len(s["audios"])) for s in samples]
        assert all(s["messages"][-1]["role"] == "assistant" for s in samples)
    assert got == {
        "mllm_demo": [(2, 0, 0), (1, 0, 0), (1, 0, 0), (2, 0, 0), (1, 0, 0), (1, 0, 0)],
        "mllm_video_demo": [(0, 1, 0)] * 3,
        "mllm_audio_demo": [(0, 0, 1)] * 3,
        "mllm_video_audio_demo": [(0, 1, 1)] * 3,
    }


def test_demo_dataset_tokenizes_with_the_processors_image_tokens(tiny_qwen2_vl, demo_dir, tmp_path):
    """mllm_demo as registered upstream, media relative to dataset_dir: ids equal the inference rendering."""
    data, tok, cfg = _prepare(tiny_qwen2_vl, demo_dir, tmp_path, dataset="mllm_demo")
    assert len(data.train) == 6 and data.reports[0].invalid == 0 and data.reports[0].dropped == 0
    raw = json.loads((demo_dir / "mllm_demo.json").read_text(encoding="utf-8"))
    image_pad = tok.convert_tokens_to_ids("<|image_pad|>")
    for i, record in enumerate(raw):
        row = data.train[i]
        paths = [str((demo_dir / p).resolve()) for p in record["images"]]
        assert row["images"] == paths
        want = _official_ids(tiny_qwen2_vl, record["messages"], paths, SMALL)
        # the official template ends the conversation with "<|im_end|>\n"; training stops at <|im_end|> (the
        # separator after an end-of-turn belongs to the next prompt, docs/architecture.md)
        assert tok.decode(want[len(row["input_ids"]) :]) == "\n"
        assert row["input_ids"] == want[: len(row["input_ids"])]
    # record 0 holds 1.jpg twice (10 tokens each at SMALL), record 1 holds 2.jpg (grid 1x6x8 -> 12)
    assert data.train[0]["input_ids"].count(image_pad) == 20
    assert data.train[1]["input_ids"].count(image_pad) == 12


def test_labels_cover_exactly_the_assistant_replies_never_image_tokens(tiny_qwen2_vl, demo_dir, tmp_path):
    records = [
        {
            "messages": [
                {"role": "user", "content": "<image>Who are they?"},
                {"role": "assistant", "content": "Two players."},
                {"role": "user", "content": "What are they doing?<image>"},
                {"role": "assistant", "content": "Celebrating."},
            ],
            "images": ["mllm_demo_data/1.jpg", "mllm_demo_data/3.jpg"],
        }
    ]
    data_dir = _media_data(tmp_path, demo_dir, records)
    for train_on_prompt in (False, True):
        data, tok, _ = _prepare(
            tiny_qwen2_vl, data_dir, tmp_path, train_on_prompt=train_on_prompt, overwrite_cache=True
        )
        row = data.train[0]
        ids, labels = row["input_ids"], row["labels"]
        media = {tok.convert_tokens_to_ids("<|image_pad|>"), tok.convert_tokens_to_ids("<|video_pad|>")}
        assert all(label in (-100, t) for t, label in zip(ids, labels))
        assert not any(label in media for label in labels)
        trained = [label for label in labels if label != -100]
        if train_on_prompt:
            assert trained == [t for t in ids if t not in media]
        else:
            replies = tok(["Two players.<|im_end|>", "Celebrating.<|im_end|>"], add_special_tokens=False)["input_ids"]
            assert trained == replies[0] + replies[1]
            # and they sit right after each "<|im_start|>assistant\n"
            header = tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
            starts = [i + len(header) for i in range(len(ids)) if ids[i : i + len(header)] == header]
            assert [labels[s] for s in starts] == [replies[0][0], replies[1][0]]
            assert [i for i, label in enumerate(labels) if label != -100] == (
                list(range(starts[0], starts[0] + len(replies[0])))
                + list(range(starts[1], starts[1] + len(replies[1])))
            )


def test_text_only_and_multimodal_records_mix_in_one_dataset(tiny_qwen2_vl, demo_dir, tmp_path):
    records = [
        {"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi."}]},
        {
            "messages": [{"role": "user", "content": "<image>Who?"}, {"role": "assistant", "content": "Kane."}],
            "images": ["mllm_demo_data/1.jpg"],
        },
    ]
    data, tok, _ = _prepare(tiny_qwen2_vl, _media_data(tmp_path, demo_dir, records), tmp_path)
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    assert [r["images"] for r in data.train] == [[], [str((tmp_path / "data/mllm_demo_data/1.jpg").resolve())]]
    assert [r["input_ids"].count(pad) for r in data.train] == [0, 10]
    # the collator gives the model the images' patches, grids and M-RoPE token types
    from tunekit.data.collator import MultimodalCollator

    batch = MultimodalCollator(pad_token_id=tok.pad_token_id, mm=data.mm)([data.train[0], data.train[1]])
    assert batch["image_grid_thw"].tolist() == [[1, 4, 10]]
    assert tuple(batch["pixel_values"].shape) == (40, 3 * 2 * 14 * 14)
    assert batch["mm_token_type_ids"].sum().item() == 10 and batch["mm_token_type_ids"][1].sum().item() == 10


def test_media_dir_resolves_relative_paths(tiny_qwen2_vl, demo_dir, tmp_path):
    records = [
        {
            "messages": [{"role": "user", "content": "<image>Who?"}, {"role": "assistant", "content": "Kane."}],
            "images": ["1.jpg"],
        }
    ]
    data_dir = tmp_path / "data"
    write_dataset(data_dir, "toy", records, SHAREGPT_OPENAI)
    data, _, _ = _prepare(tiny_qwen2_vl, data_dir, tmp_path, media_dir=str(demo_dir / "mllm_demo_data"))
    assert data.train[0]["images"] == [str((demo_dir / "mllm_demo_data" / "1.jpg").resolve())]


# --- errors that name the file, the record and the fix -----------------------------------------------------------


def _error(model, data_dir, tmp_path, **opts) -> str:
    from tunekit.errors import TunekitError

    with pytest.raises(TunekitError) as exc:
        _prepare(model, data_dir, tmp_path, **opts)
    return str(exc.value)


def test_placeholder_count_mismatch_names_file_record_and_counts(tiny_qwen2_vl, demo_dir, tmp_path):
    records = [
        {
            "messages": [{"role": "user", "content": "<image>Who?"}, {"role": "assistant", "content": "Kane."}],
            "images": ["mllm_demo_data/1.jpg", "mllm_demo_data/2.jpg"],
        }
    ]
    data_dir = _media_data(tmp_path, demo_dir, records)
    assert _error(tiny_qwen2_vl, data_dir, tmp_path) == (
        f"{data_dir / 'toy.json'}, record 0: 1 <image> placeholder(s) in the text but 2 images in the record; put one "
        f"<image> where each of its images goes (LLaMA-Factory's rule), or fix the images list. (dataset 'toy'; set "
        f"bad_records: skip to skip invalid records and count them)"
    )


@pytest.mark.parametrize(
    "family, processor, what, tokens",
    [
        (
            "qwen2_vl",
            "Qwen2VLImageProcessorPil",
            "image processor",
            "<|vision_start|>, <|vision_end|>, <|image_pad|>, <|video_pad|>",
        ),
        ("qwen2_audio", "WhisperFeatureExtractor", "feature extractor", "<|AUDIO|>, <|audio_bos|>, <|audio_eos|>"),
    ],
)
def test_a_text_models_folder_is_named_with_what_the_family_lacks(
    family, processor, what, tokens, tiny_qwen, tmp_path
):
    """Without the family's processor config, then with it but without its media tokens: each error
    names what is missing."""
    import importlib

    import transformers

    from tunekit.errors import DataError

    plugin = importlib.import_module(f"tunekit.data.mm_plugins.{family}").PLUGIN
    name = {"qwen2_vl": "Qwen2-VL", "qwen2_audio": "Qwen2-Audio"}[family]
    folder = tmp_path / "text-model"
    shutil.copytree(tiny_qwen, folder)
    cfg = _cfg(folder, tmp_path, tmp_path, template=family)
    with pytest.raises(DataError) as err:
        plugin.load(cfg, str(folder))
    assert str(err.value).startswith(f"{folder} has no {what} (preprocessor_config.json) for {name}: ")
    getattr(transformers, processor)().save_pretrained(folder)
    with pytest.raises(DataError) as err:
        plugin.load(cfg, str(folder))
    assert str(err.value) == f"the tokenizer of {folder} lacks {name}'s {tokens}: is it a {name} model?"


def test_missing_and_corrupt_images_are_named(tiny_qwen2_vl, demo_dir, tmp_path):
    records = [
        {
            "messages": [{"role": "user", "content": "<image>Who?"}, {"role": "assistant", "content": "Kane."}],
            "images": ["mllm_demo_data/nope.jpg"],
        }
    ]
    data_dir = _media_data(tmp_path, demo_dir, records)
    assert _error(tiny_qwen2_vl, data_dir, tmp_path).startswith(
        f"{data_dir / 'toy.json'}, record 0: images[0] 'mllm_demo_data/nope.jpg' not found (looked for "
        f"{data_dir / 'mllm_demo_data/nope.jpg'}). Fix the path, or set media_dir to the folder the paths are "
        "relative to."
    )
    truncated = data_dir / "mllm_demo_data" / "cut.jpg"
    truncated.write_bytes((demo_dir / "mllm_demo_data" / "1.jpg").read_bytes()[:300])
    (data_dir / "mllm_demo_data" / "text.jpg").write_text("not an image", encoding="utf-8")
    for name in ("cut.jpg", "text.jpg"):
        records[0]["images"] = [f"mllm_demo_data/{name}"]
        write_dataset(data_dir, "toy", records, SHAREGPT_OPENAI)
        message = _error(tiny_qwen2_vl, data_dir, tmp_path)
        assert message.startswith(
            f"{data_dir / 'toy.json'}, record 0: image {(data_dir / 'mllm_demo_data' / name).resolve()} "
            f"cannot be read ("
        )
        assert "the file is corrupt or not an image. Replace it, or remove the record." in message
    # bad_records: skip counts it and keeps the good records
    records.append(
        {
            "messages": [{"role": "user", "content": "<image>Who?"}, {"role": "assistant", "content": "Kane."}],
            "images": ["mllm_demo_data/1.jpg"],
        }
    )
    write_dataset(data_dir, "toy", records, SHAREGPT_OPENAI)
    data, _, _ = _prepare(tiny_qwen2_vl, data_dir, tmp_path, bad_records="skip")
    assert (len(data.train), data.reports[0].invalid) == (1, 1)


def test_images_with_a_text_only_template_or_model_are_refused(tiny_qwen2_vl, tiny_qwen, demo_dir, tmp_path):
    records = [
        {
            "messages": [{"role": "user", "content": "<image>Who?"}, {"role": "assistant", "content": "Kane."}],
            "images": ["mllm_demo_data/1.jpg"],
        }
    ]
    data_dir = _media_data(tmp_path, demo_dir, records)
    assert _error(tiny_qwen, data_dir, tmp_path, template="qwen") == (
        f"{data_dir / 'toy.json'}, record 0: has images, but template 'qwen' is text-only: train a vision-language "
        f"model with its multimodal template (e.g. qwen2_vl for Qwen2-VL / Qwen2.5-VL), or remove the images column "
        "from the dataset to train on the text. (dataset 'toy'; set bad_records: skip to skip invalid records and "
        "count them)"
    )
    assert _error(tiny_qwen2_vl, data_dir, tmp_path, template="qwen") == (
        f"template 'qwen' is text-only, but {tiny_qwen2_vl} is a vision-language model (model_type 'qwen2_vl'): use "
        "its "
        f"multimodal template (qwen2_vl), so images are expanded into the model's image tokens."
    )
    assert _error(tiny_qwen, data_dir, tmp_path) == (
        f"template 'qwen2_vl' is for qwen2_vl, qwen2_5_vl models, but {tiny_qwen} has model_type 'qwen2': choose the "
        f"template of this model (`tunekit templates`)."
    )


def test_audios_are_refused_by_name_for_qwen2_vl(tiny_qwen2_vl, demo_dir, tmp_path):
    (attr_file,) = [demo_dir / "mllm_audio_demo.json"]  # videos train since tests/multimodal/test_vlm_video.py
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    shutil.copy(attr_file, data_dir / "v.json")
    info = {"toy": {"file_name": "v.json", **SHAREGPT_OPENAI, "columns": {"messages": "messages", "audios": "audios"}}}
    (data_dir / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    assert _error(tiny_qwen2_vl, data_dir, tmp_path).startswith(
        f"{data_dir / 'v.json'}, record 0: has audios; the qwen2_vl family in tunekit trains on images, videos only "
        "so "
        f"far (see docs/multimodal.md)."
    )


def test_option_rules():
    from tunekit.config import load_config
    from tunekit.errors import TunekitError

    cfg = load_config(None, {"model_name_or_path": "m"})
    assert (
        cfg.image_max_pixels,
        cfg.freeze_vision_tower,
        cfg.freeze_multi_modal_projector,
        cfg.freeze_language_model,
    ) == (None, True, True, False)  # None: the processor folder's
    with pytest.raises(
        TunekitError,
        match="freeze_vision_tower, freeze_multi_modal_projector and freeze_language_model "
        "are all true: nothing would be trained",
    ):
        load_config(None, {"model_name_or_path": "m", "freeze_language_model": True})
    with pytest.raises(TunekitError, match="image_min_pixels 4096 is larger than image_max_pixels 1024"):
        load_config(None, {"model_name_or_path": "m", "image_min_pixels": 4096, "image_max_pixels": 1024})


# --- model: what trains -------------------------------------------------------------------------------------------


def _numel(model, prefixes=None, trainable=True) -> int:
    return sum(
        p.numel()
        for n, p in model.named_parameters()
        if p.requires_grad == trainable and (prefixes is None or any(n.startswith(x) for x in prefixes))
    )


def test_freeze_options_leave_exactly_the_intended_parameters_trainable(tiny_qwen2_vl, tmp_path):
    from tunekit.model.loader import load_model, load_tokenizer

    cases = {
        (): ("model.language_model.", "lm_head."),
        (("freeze_vision_tower", False),): (
            "model.language_model.",
            "lm_head.",
            "model.visual.patch_embed.",
            "model.visual.blocks.",
        ),
        (("freeze_multi_modal_projector", False), ("freeze_language_model", True)): ("model.visual.merger.",),
    }
    for opts, parts in cases.items():
        cfg = _cfg(tiny_qwen2_vl, tmp_path, tmp_path, finetuning_type="full", **dict(opts))
        model = load_model(cfg, load_tokenizer(cfg))
        assert _numel(model) == _numel(model, parts, trainable=True) + _numel(model, parts, trainable=False)
        assert _numel(model) == sum(p.numel() for n, p in model.named_parameters() if n.startswith(parts))


def test_lora_all_targets_the_language_model_unless_the_vision_tower_is_unfrozen(tiny_qwen2_vl, tmp_path):
    from tunekit.model.loader import load_model, load_tokenizer

    def adapted(**opts):
        cfg = _cfg(tiny_qwen2_vl, tmp_path, tmp_path, finetuning_type="lora", **opts)
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
    vision = [
        f"model.visual.blocks.{i}.{m}" for i in range(2) for m in ("attn.proj", "attn.qkv", "mlp.fc1", "mlp.fc2")
    ]
    assert adapted() == sorted(lm)
    assert adapted(freeze_vision_tower=False) == sorted(lm + vision)
    assert adapted(freeze_multi_modal_projector=False) == sorted(
        lm + ["model.visual.merger.mlp.0", "model.visual.merger.mlp.2"]
    )


# --- training end to end --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["lora", "full"])
def test_sft_on_images_lowers_the_loss_and_the_result_reloads_in_plain_transformers(
    method, tiny_qwen2_vl, demo_dir, tmp_path
):
    import torch
    from transformers import AutoModelForImageTextToText

    from tunekit.flow import run_train

    records = [
        {
            "messages": [
                {"role": "user", "content": "<image>Who is this?"},
                {"role": "assistant", "content": "Kane."},
            ],
            "images": ["mllm_demo_data/1.jpg"],
        },
        {
            "messages": [
                {"role": "user", "content": "Describe <image>"},
                {"role": "assistant", "content": "A speech."},
            ],
            "images": ["mllm_demo_data/3.jpg"],
        },
    ]
    data_dir = _media_data(tmp_path, demo_dir, records)
    cfg = _cfg(
        tiny_qwen2_vl,
        data_dir,
        tmp_path,
        do_train=True,
        finetuning_type=method,
        per_device_train_batch_size=2,
        max_steps=8,
        learning_rate=2e-2 if method == "lora" else 2e-3,
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
    assert len(losses) == 8 and losses[-1] < losses[0] - 0.5, losses  # ln(vocab 1856) = 7.53 at the start
    base = AutoModelForImageTextToText.from_pretrained(tiny_qwen2_vl)
    if method == "lora":
        from peft import PeftModel

        model = PeftModel.from_pretrained(base, out)
        trained = {n for n, _ in model.named_parameters() if "lora_A" in n}
        assert trained and not any("visual" in n for n in trained)
    else:
        model = AutoModelForImageTextToText.from_pretrained(out)
        before, after = base.state_dict(), model.state_dict()
        changed = {k for k in before if not torch.equal(before[k], after[k])}
        assert changed and all(k.startswith(("model.language_model.", "lm_head.")) for k in changed)


def test_qwen2_5_vl_from_the_cli_tokenizes_like_inference_and_trains_with_lora(demo_dir, tmp_path, capsys):
    """`tunekit tiny-model OUT --like qwen2.5-vl` → same token layout rule, LoRA on the language
    model only, loss falls."""
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    from tunekit.cli.tiny_model_cmd import main as tiny_model
    from tunekit.flow import run_train

    model = tmp_path / "qwen25vl"
    assert tiny_model([str(model), "--like", "qwen2.5-vl"]) == 0
    assert "Qwen2_5_VLForConditionalGeneration (model_type qwen2_5_vl)" in capsys.readouterr().out
    records = [
        {
            "messages": [
                {"role": "user", "content": "<image>Who is this?"},
                {"role": "assistant", "content": "Kane."},
            ],
            "images": ["mllm_demo_data/2.jpg"],
        }
    ] * 2
    data_dir = _media_data(tmp_path, demo_dir, records)
    data, tok, _ = _prepare(model, data_dir, tmp_path)
    row = data.train[0]
    want = _official_ids(model, records[0]["messages"], row["images"], SMALL)
    assert row["input_ids"] == want[:-1] and tok.decode(want[-1:]) == "\n"
    cfg = _cfg(
        model,
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
    losses = logged_losses(tmp_path / "out")
    assert len(losses) == 6 and losses[-1] < losses[0] - 0.5, losses
    peft_model = PeftModel.from_pretrained(AutoModelForImageTextToText.from_pretrained(model), tmp_path / "out")
    adapted = {n for n, _ in peft_model.named_parameters() if "lora_A" in n}
    assert len(adapted) == 14 and all(".language_model." in n for n in adapted)


def test_openai_image_parts_equal_the_placeholder_form(tiny_qwen2_vl, demo_dir, tmp_path):
    placeholder = {
        "messages": [{"role": "user", "content": "Who is <image>this?"}, {"role": "assistant", "content": "Kane."}],
        "images": ["mllm_demo_data/1.jpg"],
    }
    parts = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Who is "},
                    {"type": "image_url", "image_url": {"url": "mllm_demo_data/1.jpg"}},
                    {"type": "text", "text": "this?"},
                ],
            },
            {"role": "assistant", "content": "Kane."},
        ]
    }
    data, _, _ = _prepare(tiny_qwen2_vl, _media_data(tmp_path, demo_dir, [placeholder, parts]), tmp_path)
    assert (
        data.train[0]["input_ids"] == data.train[1]["input_ids"] and data.train[0]["images"] == data.train[1]["images"]
    )
    assert data.train[0]["labels"] == data.train[1]["labels"]


def test_gradient_accumulation_equals_the_larger_batch(tiny_qwen2_vl, demo_dir, tmp_path):
    """2 samples x 1 step == 1 sample x 2 accumulated micro-batches (loss averaged over the step's trained tokens)."""
    import torch
    from safetensors.torch import load_file

    from tunekit.flow import run_train

    records = [
        {
            "messages": [
                {"role": "user", "content": "<image>Who is this?"},
                {"role": "assistant", "content": "Kane."},
            ],
            "images": ["mllm_demo_data/1.jpg"],
        },
        {
            "messages": [
                {"role": "user", "content": "Describe <image> please"},
                {"role": "assistant", "content": "A speech in space."},
            ],
            "images": ["mllm_demo_data/2.jpg"],
        },
    ]
    data_dir = _media_data(tmp_path, demo_dir, records)
    weights = {}
    for batch, accumulation in ((2, 1), (1, 2)):
        out = tmp_path / f"out-{batch}x{accumulation}"
        cfg = _cfg(
            tiny_qwen2_vl,
            data_dir,
            tmp_path,
            do_train=True,
            finetuning_type="full",
            output_dir=str(out),
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accumulation,
            max_steps=2,
            learning_rate=1e-3,
            optim="sgd",
            logging_steps=1,
            save_strategy="no",
            disable_tqdm=True,
            seed=0,
            gradient_checkpointing=False,
        )
        run_train(cfg)
        weights[batch] = load_file(str(out / "model.safetensors"))
    base = load_file(str(tiny_qwen2_vl / "model.safetensors"))
    # SGD, 2 steps of lr 1e-3: each weight moves by lr x its gradient; the two runs sum the same per-token terms in a
    # different order (fp32), so they differ by rounding only: a few float32 ulps of the weights, which are at most ~1
    # in magnitude (norm weights start at 1), hence 64 eps x max(update, 1)
    moved = max((weights[2][k] - base[k]).abs().max().item() for k in base)
    diff = max((weights[2][k] - weights[1][k]).abs().max().item() for k in base)
    assert moved > 1e-4
    assert diff <= 64 * torch.finfo(torch.float32).eps * max(moved, 1.0), (diff, moved)


@pytest.mark.parametrize("precompute", [False, True])
def test_dpo_on_images_starts_at_ln2_and_both_answers_see_the_image(precompute, tiny_qwen2_vl, demo_dir, tmp_path):
    import math

    from tunekit.flow import run_train
    from tunekit.train.batching import MultimodalPairCollator

    entry = {
        "formatting": "sharegpt",
        "ranking": True,
        "columns": {"messages": "messages", "images": "images", "chosen": "chosen", "rejected": "rejected"},
        "tags": SHAREGPT_OPENAI["tags"],
    }
    records = [
        {
            "messages": [{"role": "user", "content": "<image>Who is this?"}],
            "chosen": {"role": "assistant", "content": "Kane."},
            "rejected": {"role": "assistant", "content": "Nobody."},
            "images": ["mllm_demo_data/1.jpg"],
        },
        {
            "messages": [{"role": "user", "content": "What happens in <image>?"}],
            "chosen": {"role": "assistant", "content": "A speech."},
            "rejected": {"role": "assistant", "content": "Rain."},
            "images": ["mllm_demo_data/3.jpg"],
        },
    ]
    data_dir = tmp_path / "data"
    shutil.copytree(demo_dir / "mllm_demo_data", data_dir / "mllm_demo_data")
    write_dataset(data_dir, "toy", records, entry)
    opts = dict(
        stage="dpo",
        do_train=True,
        finetuning_type="lora",
        per_device_train_batch_size=2,
        max_steps=3,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        gradient_checkpointing=False,
        precompute_ref_log_probs=precompute,
    )
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    cfg = _cfg(tiny_qwen2_vl, data_dir, tmp_path, **opts)
    tok = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tok, "dpo")
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    row = data.train[0]
    assert row["chosen_input_ids"].count(pad) == row["rejected_input_ids"].count(pad) == 10
    assert not any(label == pad for label in row["chosen_labels"] + row["rejected_labels"])
    batch = MultimodalPairCollator(pad_token_id=tok.pad_token_id, mm=data.mm)([data.train[0], data.train[1]])
    assert batch["image_grid_thw"].tolist() == [[1, 4, 10], [1, 4, 10], [1, 4, 10], [1, 4, 10]]
    run_train(cfg)
    losses = logged_losses(tmp_path / "out")
    # step 0: the policy is the reference (LoRA's B = 0), so every pair's sigmoid loss is -log sigmoid(0) = ln 2
    assert abs(losses[0] - math.log(2)) < 1e-6, losses


def test_chat_with_an_image_generates_what_plain_transformers_generates(tiny_qwen2_vl, demo_dir, tmp_path):
    """`tunekit chat --image` path: the engine's prompt ids and greedy reply equal
    model.generate on the same inputs."""
    import io

    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from tunekit.cli.chat_cmd import repl
    from tunekit.config import load_config
    from tunekit.infer.engine import ChatEngine

    image = str(demo_dir / "mllm_demo_data" / "1.jpg")
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(tiny_qwen2_vl),
            "template": "qwen2_vl",
            "image_max_pixels": SMALL,
            "max_new_tokens": 6,
            "do_sample": False,
        },
    )
    engine = ChatEngine(cfg)
    messages = [{"role": "user", "content": "Who is this?"}]
    ids, media = engine.render_media(messages, [image])
    want = _official_ids(tiny_qwen2_vl, [{"role": "user", "content": "<image>Who is this?"}], [image], SMALL)
    assert ids == want + engine.tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    (reply,) = engine.chat(messages, images=[image])
    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen2_vl).eval()
    pixels = Qwen2VLImageProcessorPil.from_pretrained(tiny_qwen2_vl)(
        images=[Image.open(image).convert("RGB")],
        size={"shortest_edge": 32 * 32, "longest_edge": SMALL},
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
    # the REPL's /image line puts the image into the next message
    buf = io.StringIO()
    assert repl(engine, [f"/image {image}", "Who is this?"], buf) == 1
    assert buf.getvalue() == reply.text + "\n"


def test_videos_and_audio_without_pyav_say_how_to_install_it(monkeypatch):
    import sys

    from tunekit.data.mm_plugins.audio import read_audio
    from tunekit.data.mm_plugins.video import read_clip
    from tunekit.errors import DataError

    monkeypatch.setitem(sys.modules, "av", None)  # `import av` raises ImportError
    fix = 'needs PyAV: pip install -e ".[vision]" (or pip install av).'
    with pytest.raises(DataError) as err:
        read_clip("v.mp4", "x.json, record 3", 2.0, 128, max_pixels=256 * 256, min_pixels=16 * 16)
    assert str(err.value) == f"x.json, record 3: reading videos {fix}"
    with pytest.raises(DataError) as err:
        read_audio("a.wav", "x.json, record 4", 16000)
    assert str(err.value) == f"x.json, record 4: reading audio {fix}"


def test_demo_videos_decode_with_pyav_and_sample_by_fps_and_maxlen(demo_dir, tmp_path):
    pytest.importorskip("av")
    from tunekit.data.mm_plugins.video import read_clip, sample_indices
    from tunekit.errors import DataError

    d, size = demo_dir / "mllm_demo_data", dict(max_pixels=256 * 256, min_pixels=16 * 16)
    # 1.mp4: 243 frames over 9.72 s -> floor(9.72 x 2) = 19 frames at video_fps 2; 2.avi: 270 frames, 9.03 s -> 18
    got = {
        name: len(read_clip(str(d / name), "r", 2.0, 128, **size).indices)
        for name in ("1.mp4", "2.avi", "3.mp4", "4.mp4")
    }
    assert got == {"1.mp4": 19, "2.avi": 18, "3.mp4": 12, "4.mp4": 10}
    assert len(read_clip(str(d / "1.mp4"), "r", 2.0, 8, **size).indices) == 8  # video_maxlen caps it
    assert sample_indices(243, 9.72, 2.0, 4) == [0, 80, 161, 242]
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"garbage" * 100)
    with pytest.raises(
        DataError,
        match=r"^x.json, record 3: video .*bad.mp4 cannot be read \(InvalidDataError: .*\); the file "
        r"is corrupt or not a video. Replace it, or remove the record.$",
    ):
        read_clip(str(bad), "x.json, record 3", 2.0, 128, **size)
