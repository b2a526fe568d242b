"""The preference stages with media (KTO and the reward model with images, DPO / KTO with videos and
audio), resume and QLoRA on a tiny vision-language model. SFT and DPO with images:
tests/multimodal/test_multimodal.py."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from tests.helpers import log_rows, logged_losses, write_dataset

TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}
SMALL = 28 * 28 * 16  # image_max_pixels: 1.jpg (300x168) -> grid 1x4x10 -> 10 image tokens; 3.jpg -> 10 too


@pytest.fixture(scope="session")
def tiny_qwen2_vl(tmp_path_factory) -> Path:
    from tunekit.tiny.vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen2-vl-stages") / "model", like="qwen2-vl", seed=0)


def _cfg(model, data_dir, out, **opts):
    from tunekit.config import load_config

    base = {
        "model_name_or_path": str(model),
        "template": "qwen2_vl",
        "dataset": "toy",
        "dataset_dir": str(data_dir),
        "output_dir": str(out),
        "cutoff_len": 1024,
        "image_max_pixels": SMALL,
        "report_to": "none",
        "do_train": True,
        "per_device_train_batch_size": 2,
        "logging_steps": 1,
        "save_strategy": "no",
        "disable_tqdm": True,
        "seed": 0,
        "gradient_checkpointing": False,
    }
    return load_config(None, {**base, **opts})


def _data(tmp_path, demo_dir, records, entry) -> Path:
    data_dir = tmp_path / "data"
    shutil.copytree(demo_dir / "mllm_demo_data", data_dir / "mllm_demo_data", dirs_exist_ok=True)
    write_dataset(data_dir, "toy", records, entry)
    return data_dir


KTO_ENTRY = {
    "formatting": "sharegpt",
    "columns": {"messages": "messages", "kto_tag": "label", "images": "images"},
    "tags": TAGS,
}
KTO_RECORDS = [  # kto_en_demo's form (messages + label) with mllm_demo's images
    {
        "messages": [
            {"role": "user", "content": "<image>Who is this?"},
            {"role": "assistant", "content": "Harry Kane."},
        ],
        "label": True,
        "images": ["mllm_demo_data/1.jpg"],
    },
    {
        "messages": [
            {"role": "user", "content": "What happens in <image>?"},
            {"role": "assistant", "content": "It rains."},
        ],
        "label": False,
        "images": ["mllm_demo_data/3.jpg"],
    },
]
PAIR_ENTRY = {
    "formatting": "sharegpt",
    "ranking": True,
    "tags": TAGS,
    "columns": {"messages": "messages", "chosen": "chosen", "rejected": "rejected", "images": "images"},
}
PAIR_RECORDS = [
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


def _prepared(cfg, stage):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok, stage), tok


# --- KTO ------------------------------------------------------------------------------------------------------------


def test_kto_batch_gives_each_example_and_its_kl_pair_the_examples_image(tiny_qwen2_vl, demo_dir, tmp_path):
    from tunekit.train.stages.kto import MultimodalKTOCollator, with_kl_pairs

    cfg = _cfg(
        tiny_qwen2_vl,
        _data(tmp_path, demo_dir, KTO_RECORDS, KTO_ENTRY),
        tmp_path / "out",
        stage="kto",
        finetuning_type="lora",
    )
    data, tok = _prepared(cfg, "kto")
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    rows = [with_kl_pairs(data.train)[i] for i in range(2)]
    assert [r["prompt_ids"].count(pad) for r in rows] == [10, 10] and [r["kto_tag"] for r in rows] == [True, False]
    assert not any(t == pad for r in rows for t in r["response_ids"] + [y for y in r["labels"] if y != -100])
    batch = MultimodalKTOCollator(pad_token_id=tok.pad_token_id, mm=data.mm)(rows)
    # the KL pair i = prompt i (its image) + answer of example i+1
    assert batch["kl_input_ids"][0, : len(rows[0]["prompt_ids"])].tolist() == rows[0]["prompt_ids"]
    assert batch["image_grid_thw"].tolist() == batch["kl_image_grid_thw"].tolist() == [[1, 4, 10], [1, 4, 10]]
    assert batch["pixel_values"].equal(batch["kl_pixel_values"])
    for prefix in ("", "kl_"):
        assert batch[f"{prefix}mm_token_type_ids"].equal((batch[f"{prefix}input_ids"] == pad).long())
        assert batch[f"{prefix}mm_token_type_ids"].sum(1).tolist() == [10, 10]


def test_kto_on_images_starts_at_half_and_the_reference_sees_each_halfs_image(tiny_qwen2_vl, demo_dir, tmp_path):
    """Step 0: policy == reference (LoRA's B = 0), so r = 0 and z0 = max(0, KL) = 0 and each example's loss is
    λ (1 - σ(0)) = 0.5 (kto_chosen_weight = kto_rejected_weight = 1). The precomputed reference of both halves (the
    example and its KL pair) equals the model's forward with that half's image, and differs
    from it without the image."""
    import torch

    from tunekit.flow import run_train
    from tunekit.model.loader import load_model
    from tunekit.train.batching import sequence_view
    from tunekit.train.stages.dpo import forward_logps
    from tunekit.train.stages.kto import MultimodalKTOCollator, precompute_reference, with_kl_pairs
    from tunekit.train.stages.reference_policy import media_inputs

    data_dir = _data(tmp_path, demo_dir, KTO_RECORDS, KTO_ENTRY)
    cfg = _cfg(
        tiny_qwen2_vl, data_dir, tmp_path / "out", stage="kto", finetuning_type="lora", max_steps=3, learning_rate=1e-2
    )
    run_train(cfg)
    log = log_rows(tmp_path / "out")
    assert len(logged_losses(tmp_path / "out")) == 3 and abs(log[0]["loss"] - 0.5) < 1e-7, log
    assert log[0]["kto/kl"] == 0.0 and log[0]["rewards/chosen"] == 0.0 and log[0]["rewards/rejected"] == 0.0

    data, tok = _prepared(cfg.model_copy(update={"dtype": "float64"}), "kto")
    model = load_model(cfg.model_copy(update={"dtype": "float64", "finetuning_type": "full"}), tok, is_trainable=False)
    collator = MultimodalKTOCollator(pad_token_id=tok.pad_token_id, mm=data.mm)
    train = with_kl_pairs(data.train)
    with_ref = precompute_reference(train, collator, model, model, batch_size=2)
    batch = collator([train[0], train[1]])
    with torch.no_grad():
        for prefix, column in (("", "ref_logps"), ("kl_", "ref_kl_logps")):
            seen = forward_logps(model, **sequence_view(batch, prefix), **media_inputs(batch, prefix))[0]
            blind = forward_logps(model, **sequence_view(batch, prefix))[0]
            # same rows, same batch size, same float64 forward: equal up to the rounding of a different summation
            # order at most (2 * tokens * 2**-53 relative); the image moves the log-probs by far more
            assert torch.allclose(torch.tensor(with_ref[column], dtype=torch.float64), seen, rtol=1e-12, atol=0)
            assert (seen - blind).abs().min() > 1e-6, (seen, blind)


def test_kto_with_images_padding_free_ends_on_the_padded_runs_weights(tiny_qwen2_vl, demo_dir, tmp_path):
    """``padding_free`` with images in stage kto (examples in one row, their mismatched pairs in another, each with the
    example's image): 2 SGD steps of full fine-tuning in float64 end on the padded run's weights."""
    from tests.helpers import padded_and_padding_free_weights
    from tests.tolerances import FLOAT64_WEIGHT_TOL

    data_dir = _data(tmp_path, demo_dir, KTO_RECORDS, KTO_ENTRY)
    moved, diff = padded_and_padding_free_weights(
        tiny_qwen2_vl,
        {
            "template": "qwen2_vl",
            "dataset": "toy",
            "dataset_dir": str(data_dir),
            "cutoff_len": 1024,
            "image_max_pixels": SMALL,
            "report_to": "none",
            "do_train": True,
            "per_device_train_batch_size": 2,
            "save_strategy": "no",
            "disable_tqdm": True,
            "seed": 0,
            "gradient_checkpointing": False,
            "stage": "kto",
            "finetuning_type": "full",
            "dtype": "float64",
            "max_steps": 2,
            "learning_rate": 1e-1,
            "optim": "sgd",
        },
        tmp_path,
    )
    # the two runs' float64 gradients differ by summation order only (tests/multimodal/test_padding_free_media.py
    # derives the bound), far under FLOAT64_WEIGHT_TOL; a row whose samples attended to each other moves them
    # by ~1e-4 or more
    assert moved > 1e-5
    assert diff <= FLOAT64_WEIGHT_TOL, (diff, moved)


# --- reward model ----------------------------------------------------------------------------------------------------


def test_reward_model_on_images_trains_and_scores_depend_on_the_image(tiny_qwen2_vl, demo_dir, tmp_path):
    import torch
    from safetensors.torch import load_file

    from tunekit.flow import run_train
    from tunekit.train.batching import MultimodalPairCollator
    from tunekit.train.stages.value_head import VALUE_HEAD_FILE, load_value_head_model

    out = tmp_path / "out"
    data_dir = _data(tmp_path, demo_dir, PAIR_RECORDS, PAIR_ENTRY)
    cfg = _cfg(
        tiny_qwen2_vl, data_dir, out, stage="rm", finetuning_type="lora", max_steps=6, learning_rate=2e-2, lora_rank=8
    )
    run_train(cfg)
    losses = logged_losses(out)
    # step 0: the head starts at ~0 (std 1/(hidden+1)) on the same base for both answers: the loss is near ln 2
    assert len(losses) == 6 and abs(losses[0] - math.log(2)) < 0.05 and losses[-1] < losses[0] - 0.2, losses
    assert set(load_file(str(out / VALUE_HEAD_FILE))) == {"v_head.summary.weight", "v_head.summary.bias"}
    reward = load_value_head_model(out)  # adapter merged into plain transformers' Qwen2VLForConditionalGeneration
    assert type(reward.pretrained_model).__name__ == "Qwen2VLForConditionalGeneration"
    data, tok = _prepared(cfg, "rm")
    row = data.train[0]
    collator = MultimodalPairCollator(pad_token_id=tok.pad_token_id, mm=data.mm)
    own = collator([row])
    other = collator([{**row, "images": [str(data_dir / "mllm_demo_data" / "3.jpg")]}])  # also 10 image tokens
    media = [k for k in own if k not in ("input_ids", "attention_mask", "token_labels")]
    with torch.no_grad():
        scores = {
            name: reward.score(b["input_ids"], b["attention_mask"], **{k: b[k] for k in media})
            for name, b in (("own", own), ("other", other))
        }
    chosen_own, rejected_own = scores["own"].tolist()
    assert chosen_own > rejected_own  # the trained preference
    assert (scores["own"] - scores["other"]).abs().min() > 1e-4, scores


# --- videos and audio in dpo and kto ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_qwen2_audio(tmp_path_factory) -> Path:
    from tunekit.tiny.vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen2-audio-stages") / "model", like="qwen2-audio", seed=0)


MEDIA_CASES = {
    "videos": ("mllm_video_demo.json", "qwen2_vl", {"video_max_pixels": 64 * 64, "video_maxlen": 4}),
    "audios": ("mllm_audio_demo.json", "qwen2_audio", {}),
}
#: the model inputs of each kind, and how many rows (one per media item) a batch of the two demo records gives them
MEDIA_KEYS = {
    "videos": ("video_grid_thw", "pixel_values_videos"),
    "audios": ("feature_attention_mask", "input_features"),
}


def _preference_records(demo_dir, file, stage, kind):
    """The first two records of a LLaMA-Factory demo file (its paths, relative to the demo folder) as dpo pairs (the
    other record's answer as the rejected one) or kto examples (the first desirable, the second not)."""
    raw = json.loads((demo_dir / file).read_text(encoding="utf-8"))[:2]
    if stage == "kto":
        return [{"messages": r["messages"], "label": i == 0, kind: r[kind]} for i, r in enumerate(raw)]
    return [
        {
            "messages": r["messages"][:-1],
            "chosen": r["messages"][-1],
            "rejected": raw[1 - i]["messages"][-1],
            kind: r[kind],
        }
        for i, r in enumerate(raw)
    ]


@pytest.mark.parametrize("kind", ["videos", "audios"])
@pytest.mark.parametrize("stage", ["dpo", "kto"])
def test_videos_and_audio_train_in_dpo_and_kto_and_every_sequence_gets_its_media(
    stage, kind, request, demo_dir, tmp_path
):
    pytest.importorskip("av")
    from tunekit.flow import run_train
    from tunekit.train.batching import MultimodalPairCollator
    from tunekit.train.stages.kto import MultimodalKTOCollator, with_kl_pairs

    file, template, opts = MEDIA_CASES[kind]
    model = request.getfixturevalue("tiny_qwen2_vl" if kind == "videos" else "tiny_qwen2_audio")
    columns = (
        {"messages": "messages", "kto_tag": "label", kind: kind}
        if stage == "kto"
        else {"messages": "messages", "chosen": "chosen", "rejected": "rejected", kind: kind}
    )
    entry = {"formatting": "sharegpt", "ranking": stage == "dpo", "tags": TAGS, "columns": columns}
    data_dir = tmp_path / "data"
    write_dataset(data_dir, "toy", _preference_records(demo_dir, file, stage, kind), entry)
    cfg = _cfg(
        model,
        data_dir,
        tmp_path / "out",
        stage=stage,
        template=template,
        media_dir=str(demo_dir),
        finetuning_type="lora",
        max_steps=2,
        learning_rate=1e-2,
        **opts,
    )
    data, tok = _prepared(cfg, stage)
    rows = [data.train[0], data.train[1]]
    assert [len(r[kind]) for r in rows] == [1, 1]
    grid_key, values_key = MEDIA_KEYS[kind]
    if stage == "dpo":
        batch = MultimodalPairCollator(pad_token_id=tok.pad_token_id, mm=data.mm)(rows)
        halves = [batch[grid_key][:2], batch[grid_key][2:]]  # chosen 0, 1 then rejected 0, 1: the same media twice
    else:
        rows = [with_kl_pairs(data.train)[i] for i in range(2)]
        batch = MultimodalKTOCollator(pad_token_id=tok.pad_token_id, mm=data.mm)(rows)
        halves = [batch[grid_key], batch[f"kl_{grid_key}"]]  # the examples and their KL pairs: the same prompts' media
        assert batch[values_key].equal(batch[f"kl_{values_key}"])
    assert halves[0].shape[0] == 2 and halves[0].equal(halves[1])
    run_train(cfg)
    losses = logged_losses(tmp_path / "out")
    # step 0: policy == reference (LoRA's B = 0): dpo's sigmoid loss is -log σ(0) = ln 2, kto's is 1 - σ(0) = 0.5
    assert len(losses) == 2 and abs(losses[0] - (math.log(2) if stage == "dpo" else 0.5)) < 1e-6, losses


# --- resume and QLoRA ------------------------------------------------------------------------------------------------

SFT_ENTRY = {"formatting": "sharegpt", "columns": {"messages": "messages", "images": "images"}, "tags": TAGS}
SFT_RECORDS = [
    {
        "messages": [{"role": "user", "content": "<image>Who is this?"}, {"role": "assistant", "content": "Kane."}],
        "images": ["mllm_demo_data/1.jpg"],
    },
    {
        "messages": [
            {"role": "user", "content": "Describe <image> please"},
            {"role": "assistant", "content": "A speech."},
        ],
        "images": ["mllm_demo_data/2.jpg"],
    },
    {"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there."}]},
    {
        "messages": [{"role": "user", "content": "What is in <image>?"}, {"role": "assistant", "content": "Players."}],
        "images": ["mllm_demo_data/3.jpg"],
    },
]


def test_resume_on_images_ends_with_the_weights_of_the_uninterrupted_run(tiny_qwen2_vl, demo_dir, tmp_path):
    from safetensors.torch import load_file

    from tests.tolerances import FLOAT64_WEIGHT_TOL
    from tunekit.flow import run_train

    data_dir = _data(tmp_path, demo_dir, SFT_RECORDS, SFT_ENTRY)
    common = dict(
        stage="sft",
        finetuning_type="full",
        dtype="float64",
        max_steps=4,
        save_strategy="steps",
        save_steps=2,
        learning_rate=5e-3,
        lr_scheduler_type="cosine",
        warmup_steps=1,
        freeze_multi_modal_projector=False,
    )
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    run_train(_cfg(tiny_qwen2_vl, data_dir, full, **common))
    resumed.mkdir()  # the run "died" after its checkpoint at step 2: only that checkpoint survives
    shutil.copytree(full / "checkpoint-2", resumed / "checkpoint-2")
    run_train(_cfg(tiny_qwen2_vl, data_dir, resumed, resume_from_checkpoint=True, **common))
    assert [r["step"] for r in log_rows(resumed) if "loss" in r] == [3, 4]
    # float64: the resumed run restores weights, optimizer, scheduler and RNG and replays the same image batches
    # (tests/tolerances.py: FLOAT64_WEIGHT_TOL); a skipped or repeated batch moves weights by ~lr = 5e-3
    assert logged_losses(resumed) == pytest.approx(logged_losses(full)[2:], abs=FLOAT64_WEIGHT_TOL)
    wa, wb, base = (load_file(str(p / "model.safetensors")) for p in (full, resumed, tiny_qwen2_vl))
    assert wa.keys() == wb.keys()
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < FLOAT64_WEIGHT_TOL
    # the files keep transformers' original layout (model.layers.*, visual.*): the projector and the language model
    # trained, the frozen vision tower did not
    moved = {k for k in wa if not wa[k].equal(base[k].to(wa[k].dtype))}
    assert any(k.startswith("visual.merger.") for k in moved) and any(k.startswith("model.layers.") for k in moved)
    assert not any(k.startswith(("visual.blocks.", "visual.patch_embed.")) for k in moved)


def test_qlora_on_a_vlm_quantizes_only_the_language_model_trains_and_the_adapter_reloads(
    tiny_qwen2_vl, demo_dir, tmp_path
):
    pytest.importorskip("bitsandbytes")
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForImageTextToText, BitsAndBytesConfig

    from tunekit.flow import run_train
    from tunekit.model.loader import load_model, load_tokenizer

    out = tmp_path / "out"
    cfg = _cfg(
        tiny_qwen2_vl,
        _data(tmp_path, demo_dir, SFT_RECORDS, SFT_ENTRY),
        out,
        stage="sft",
        finetuning_type="lora",
        quantization_bit=4,
        max_steps=2,
        learning_rate=2e-2,
        lora_rank=8,
    )

    def linear_kinds(model):
        kinds = {}
        for name, module in model.named_modules():
            if (
                type(module).__name__ in ("Linear", "Linear4bit")
                and ".lora_" not in name
                and not name.endswith("base_layer")
            ):
                part = "visual" if ".visual." in name else "lm_head" if name.endswith("lm_head") else "language_model"
                kinds.setdefault(part, set()).add(type(module).__name__)
        return kinds

    model = load_model(cfg, load_tokenizer(cfg))
    kinds = linear_kinds(model)
    assert kinds == {"visual": {"Linear"}, "lm_head": {"Linear"}, "language_model": {"Linear4bit"}}, kinds
    del model
    run_train(cfg)
    assert len(logged_losses(out)) == 2
    saved = load_file(str(out / "adapter_model.safetensors"))
    assert saved and all(".language_model." in k for k in saved)
    # plain transformers + peft: the base quantized the same way, the adapter on top, its weights as saved (trained)
    bnb = BitsAndBytesConfig(
        load_in_4bit=True,
        llm_int8_skip_modules=["lm_head", "model.visual"],
        bnb_4bit_compute_dtype=torch.float32,
        bnb_4bit_quant_storage=torch.float32,
    )
    reloaded = PeftModel.from_pretrained(
        AutoModelForImageTextToText.from_pretrained(tiny_qwen2_vl, quantization_config=bnb), str(out)
    )
    state = reloaded.state_dict()
    for key, value in saved.items():
        want = key.replace(".lora_A.weight", ".lora_A.default.weight").replace(
            ".lora_B.weight", ".lora_B.default.weight"
        )
        assert state[want].equal(value), key
    assert max(v.abs().max().item() for k, v in saved.items() if "lora_B" in k) > 0  # B starts at 0: it trained


@pytest.mark.parametrize("like, template", [("gemma3", "gemma3"), ("llava-next", "llava_next")])
def test_kto_and_the_reward_model_run_on_other_families_with_their_own_media_inputs(
    like, template, demo_dir, tmp_path
):
    """Gemma 3 (its image-token mask ``token_type_ids``) and LLaVA-NeXT (its tile layout ``image_sizes``): the KL pairs
    get the family's own media inputs too; KTO starts at 0.5, the reward model trains (2 steps each)."""
    from tunekit.flow import run_train
    from tunekit.tiny.vlm import build_tiny_vlm
    from tunekit.train.stages.kto import MultimodalKTOCollator, with_kl_pairs

    model = build_tiny_vlm(tmp_path / "model", like=like, seed=0)
    cfg = _cfg(
        model,
        _data(tmp_path, demo_dir, KTO_RECORDS, KTO_ENTRY),
        tmp_path / "kto",
        stage="kto",
        template=template,
        finetuning_type="lora",
        max_steps=2,
        cutoff_len=2048,
    )
    data, tok = _prepared(cfg, "kto")
    batch = MultimodalKTOCollator(pad_token_id=tok.pad_token_id, mm=data.mm)(
        [with_kl_pairs(data.train)[i] for i in range(2)]
    )
    own = {"gemma3": "token_type_ids", "llava-next": "image_sizes"}[like]
    assert own in batch and f"kl_{own}" in batch and "kl_pixel_values" in batch
    run_train(cfg)
    assert abs(logged_losses(tmp_path / "kto")[0] - 0.5) < 1e-6
    write_dataset(tmp_path / "data", "toy", PAIR_RECORDS, PAIR_ENTRY)
    run_train(cfg.model_copy(update={"stage": "rm", "output_dir": str(tmp_path / "rm"), "overwrite_cache": True}))
    assert len(logged_losses(tmp_path / "rm")) == 2 and (tmp_path / "rm" / "value_head.safetensors").is_file()
