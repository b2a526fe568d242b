"""LLaVA-1.5, LLaVA-NeXT and Gemma 3 on tiny random models of the real transformers classes.

The reference for token layout is the family's own processor class (``LlavaProcessor``, ``LlavaNextProcessor``,
``Gemma3Processor``, which transformers builds on its PIL image processors without torchvision), loaded from the
tiny model's folder with ``AutoProcessor`` and run through ``processor.apply_chat_template(..., tokenize=True)``
with the official chat template saved there: exactly the ids those models get at inference.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import content_parts, logged_losses, write_dataset

SHAREGPT = {
    "formatting": "sharegpt",
    "columns": {"messages": "messages", "images": "images"},
    "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
}
FAMILIES = {"llava": "llava", "llava_next": "llava-next", "gemma3": "gemma3"}  # template -> tiny-model --like


@pytest.fixture(scope="session")
def tiny_vlms(tmp_path_factory) -> dict[str, Path]:
    from tunekit.tiny.vlm import build_tiny_vlm

    root = tmp_path_factory.mktemp("tiny-vlm-families")
    return {tpl: build_tiny_vlm(root / tpl, like=like, seed=0) for tpl, like in FAMILIES.items()}


def _cfg(model, template, data_dir, tmp_path, **opts):
    from tunekit.config import load_config

    base = {
        "model_name_or_path": str(model),
        "template": template,
        "dataset": "toy",
        "dataset_dir": str(data_dir),
        "output_dir": str(tmp_path / "out"),
        "stage": "sft",
        "cutoff_len": 1024,
        "report_to": "none",
    }
    return load_config(None, {**base, **opts})


def _prepare(model, template, data_dir, tmp_path, **opts):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    cfg = _cfg(model, template, data_dir, tmp_path, **opts)
    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok, "sft"), tok


def _media_data(tmp_path, demo_dir, records) -> Path:
    data = tmp_path / "data"
    shutil.copytree(demo_dir / "mllm_demo_data", data / "mllm_demo_data", dirs_exist_ok=True)
    write_dataset(data, "toy", records, SHAREGPT)
    return data


def _official(processor, messages, images, gen: bool) -> list[int]:
    """What the family's processor gives the conversation at inference (official template, tokenize=True)."""
    inputs = processor.apply_chat_template(
        content_parts(messages, images),
        add_generation_prompt=gen,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
    )
    return inputs["input_ids"][0].tolist()


# --- token layout = inference -------------------------------------------------------------------------------------


@pytest.mark.parametrize("template", sorted(FAMILIES))
def test_demo_dataset_ids_equal_the_processors_inference_rendering(template, tiny_vlms, demo_dir, tmp_path):
    """mllm_demo (LLaMA-Factory's file, unchanged): every record's ids and labels from the family's processor."""
    from PIL import Image
    from transformers import AutoProcessor

    model = tiny_vlms[template]
    data, tok = _prepare(model, template, demo_dir, tmp_path, dataset="mllm_demo")
    assert len(data.train) == 6 and data.reports[0].invalid == 0 and data.reports[0].dropped == 0
    processor = AutoProcessor.from_pretrained(model)
    image_id = processor.tokenizer.convert_tokens_to_ids(processor.tokenizer.image_token)
    raw = json.loads((demo_dir / "mllm_demo.json").read_text(encoding="utf-8"))
    for record, row in zip(raw, data.train):
        images = [Image.open(demo_dir / p).convert("RGB") for p in record["images"]]
        ids, labels, msgs = row["input_ids"], row["labels"], record["messages"]
        replies = [m["content"] for m in msgs if m["role"] == "assistant"]
        if template == "gemma3":
            # Gemma 3's official template renders history as training does: the whole conversation, except the
            # "\n" after the last <end_of_turn> (it belongs to the next prompt, docs/architecture.md)
            want = _official(processor, msgs, images, gen=False)
            assert ids == want[:-1] and tok.decode(want[-1:]) == "\n"
            trained = tok([r + "<end_of_turn>" for r in replies], add_special_tokens=False)["input_ids"]
        else:
            # llava-hf's template writes replies as "text " without </s>; training ends each with </s> (as LLaVA
            # was trained), so each turn is checked: the official generation prompt of the user message (BOS only
            # in the first), then " reply</s>"
            trained = tok([" " + r + "</s>" for r in replies], add_special_tokens=False)["input_ids"]
            want, used = [], 0
            for k, user in enumerate(msgs[0::2]):
                n = user["content"].count("<image>")
                prompt = _official(processor, [user], images[used : used + n], gen=True)
                assert prompt[0] == tok.bos_token_id
                want += (prompt if k == 0 else prompt[1:]) + trained[k]
                used += n
            assert ids == want
        assert [t for t, label in zip(ids, labels) if label != -100] == [t for r in trained for t in r]
        assert all(label in (-100, t) for t, label in zip(ids, labels)) and image_id not in labels
        assert ids.count(image_id) == sum(
            processor.replace_image_token(processor.image_processor(images=[im], return_tensors="pt"), 0).count(
                processor.tokenizer.image_token
            )
            for im in images
        )


def test_image_token_counts_follow_each_familys_rule(tiny_vlms, demo_dir, tmp_path):
    """LLaVA: (56/14)^2 = 16 per image (CLS dropped); LLaVA-NeXT: anyres tiles by image size; Gemma 3: 4."""
    from tunekit.data.mm_plugins import load_plugin

    paths = [str(demo_dir / "mllm_demo_data" / f) for f in ("1.jpg", "2.jpg", "3.jpg")]  # 300x168, 300x199, 300x166
    got = {
        tpl: load_plugin(_cfg(m, tpl, tmp_path, tmp_path), tpl).image_token_counts(paths, "r")
        for tpl, m in tiny_vlms.items()
    }
    # LLaVA-NeXT (select_best_resolution, then _get_unpadded_features), 1.jpg (w 300, h 168): of the pinpoints
    # (h, w) 56x112 / 112x56 / 112x112 the last keeps most pixels (scale min(112/300, 112/168): 112x62), so 2x2
    # tiles of 4x4 patches = an 8x8 grid; the padding rows go (new height int(168 * 8/300) = 4, pad 2 + 2): 4 rows
    # x 8 = 32 features + 4 row newlines + 16 base patches + 1 CLS - 1 (default strategy drops CLS) = 52.
    # 2.jpg (300x199): 8x8, new height int(199 * 8/300) = 5, pad 1 + 1 -> 6 rows: 48 + 6 + 16 = 70; 3.jpg (300x166): 52
    assert got == {"llava": [16, 16, 16], "llava_next": [52, 70, 52], "gemma3": [4, 4, 4]}


@pytest.mark.parametrize("template", sorted(FAMILIES))
def test_labels_never_cover_media_tokens_also_with_train_on_prompt(template, tiny_vlms, demo_dir, tmp_path):
    records = [
        {
            "messages": [{"role": "user", "content": "<image>Who?"}, {"role": "assistant", "content": "Kane."}],
            "images": ["mllm_demo_data/1.jpg"],
        }
    ]
    data, tok = _prepare(
        tiny_vlms[template], template, _media_data(tmp_path, demo_dir, records), tmp_path, train_on_prompt=True
    )
    ids, labels = data.train[0]["input_ids"], data.train[0]["labels"]
    media = data.mm.media_token_ids()
    assert [label for label in labels if label != -100] == [t for t in ids if t not in media]
    assert sum(t in media for t in ids) == {"llava": 16, "llava_next": 52, "gemma3": 4 + 2}[template]


# --- what trains ----------------------------------------------------------------------------------------------------

LM_LINEAR = [
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
VISION_LINEAR = [
    f"model.vision_tower.encoder.layers.{i}.{m}"
    for i in range(2)
    for m in (  # CLIP (LLaVA), SigLIP (Gemma 3)
        "mlp.fc1",
        "mlp.fc2",
        "self_attn.k_proj",
        "self_attn.out_proj",
        "self_attn.q_proj",
        "self_attn.v_proj",
    )
]
PARTS = {  # template -> (vision tower, projector, language model) parameter-name prefixes
    "llava": (("model.vision_tower.",), ("model.multi_modal_projector.",), ("model.language_model.", "lm_head.")),
    "llava_next": (
        ("model.vision_tower.",),
        ("model.multi_modal_projector.", "model.image_newline"),
        ("model.language_model.", "lm_head."),
    ),
    "gemma3": (("model.vision_tower.",), ("model.multi_modal_projector.",), ("model.language_model.",)),  # tied head
}


def _trainable(model) -> set[str]:
    return {n for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("template", sorted(FAMILIES))
def test_freeze_options_and_lora_targets_select_each_part_by_name(template, tiny_vlms, tmp_path):
    from tunekit.model.loader import load_model, load_tokenizer

    def load(method, **opts):
        cfg = _cfg(tiny_vlms[template], template, tmp_path, tmp_path, finetuning_type=method, **opts)
        return load_model(cfg, load_tokenizer(cfg))

    vision, projector, language = PARTS[template]
    model = load("full")
    names = [n for n, _ in model.named_parameters()]
    assert all(n.startswith(vision + projector + language) for n in names)  # the three parts cover the model
    of = {part: {n for n in names if n.startswith(part)} for part in (vision, projector, language)}
    assert all(of.values())
    assert _trainable(model) == of[language]  # defaults: vision tower and projector frozen
    assert _trainable(load("full", freeze_vision_tower=False)) == of[vision] | of[language]
    assert _trainable(load("full", freeze_multi_modal_projector=False, freeze_language_model=True)) == of[projector]

    def adapted(**opts):
        return sorted(
            {
                n.split(".lora_A")[0].replace("base_model.model.", "")
                for n in _trainable(load("lora", **opts))
                if ".lora_A" in n
            }
        )

    assert adapted() == sorted(LM_LINEAR)
    assert adapted(freeze_vision_tower=False) == sorted(LM_LINEAR + VISION_LINEAR)
    projector_linear = {"gemma3": []}.get(
        template, ["model.multi_modal_projector.linear_1", "model.multi_modal_projector.linear_2"]
    )
    assert adapted(freeze_multi_modal_projector=False) == sorted(LM_LINEAR + projector_linear)


# --- training end to end ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["lora", "full"])
@pytest.mark.parametrize("template", sorted(FAMILIES))
def test_sft_on_images_lowers_the_loss_and_reloads_in_plain_transformers(
    template, method, tiny_vlms, demo_dir, tmp_path
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
    model_dir = tiny_vlms[template]
    cfg = _cfg(
        model_dir,
        template,
        _media_data(tmp_path, demo_dir, records),
        tmp_path,
        do_train=True,
        finetuning_type=method,
        per_device_train_batch_size=2,
        max_steps=3,
        logging_steps=1,
        save_strategy="no",
        learning_rate=2e-2 if method == "lora" else 2e-3,
        disable_tqdm=True,
        seed=0,
        gradient_checkpointing=False,
        lora_rank=8,
    )
    run_train(cfg)
    out = tmp_path / "out"
    losses = logged_losses(out)
    # the same batch 3 times: ln(vocab 1856) = 7.53 at the start, ~0.3 lower per step at these rates (measured 0.6-0.9)
    assert len(losses) == 3 and losses[2] < losses[1] < losses[0] - 0.2, losses
    base = AutoModelForImageTextToText.from_pretrained(model_dir)
    if method == "lora":
        from peft import PeftModel

        adapted = {n for n, _ in PeftModel.from_pretrained(base, out).named_parameters() if "lora_A" in n}
        assert len(adapted) == len(LM_LINEAR) and all(".language_model." in n for n in adapted)
    else:
        before, after = base.state_dict(), AutoModelForImageTextToText.from_pretrained(out).state_dict()
        changed = {k for k in before if not torch.equal(before[k], after[k])}
        # Gemma 3's state dict lists its tied LM head (the embedding) as lm_head.weight too
        assert changed and all(k.startswith(PARTS[template][2] + ("lm_head.",)) for k in changed)


# --- after training: chat, tiny-model CLI -------------------------------------------------------------------------


@pytest.mark.parametrize("template", sorted(FAMILIES))
def test_chat_with_an_image_equals_the_processors_inference(template, tiny_vlms, demo_dir):
    """`tunekit chat --image` path: prompt ids and greedy reply equal processor + model.generate
    in plain transformers."""
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from tunekit.config import load_config
    from tunekit.infer.engine import ChatEngine

    model_dir, image = tiny_vlms[template], str(demo_dir / "mllm_demo_data" / "2.jpg")
    engine = ChatEngine(
        load_config(
            None, {"model_name_or_path": str(model_dir), "template": template, "max_new_tokens": 6, "do_sample": False}
        )
    )
    messages = [{"role": "user", "content": "Who is this?"}]
    ids, _ = engine.render_media(messages, [image])
    (reply,) = engine.chat(messages, images=[image])
    processor = AutoProcessor.from_pretrained(model_dir)
    inputs = processor.apply_chat_template(
        content_parts([{"role": "user", "content": "<image>Who is this?"}], [Image.open(image).convert("RGB")]),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
    )
    assert ids == inputs["input_ids"][0].tolist()
    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    with torch.no_grad():
        out = model.generate(
            **inputs, max_new_tokens=6, do_sample=False, eos_token_id=engine.stop_ids, pad_token_id=engine.pad_id
        )
    assert reply.text == engine.decode(out[0, len(ids) :].tolist()) and reply.completion_tokens > 0


def test_tiny_model_cli_builds_each_family_with_its_processor(tmp_path, capsys):
    from transformers import AutoConfig, AutoProcessor

    from tunekit.cli.tiny_model_cmd import main as tiny_model

    assert tiny_model([str(tmp_path / "m"), "--like", "llava-next"]) == 0
    printed = capsys.readouterr().out
    assert "LlavaNextForConditionalGeneration (model_type llava_next)" in printed
    assert "LlavaNextProcessor + LlavaNextImageProcessor (PIL path)" in printed
    processor = AutoProcessor.from_pretrained(tmp_path / "m")
    assert type(processor.image_processor).__name__ == "LlavaNextImageProcessorPil"
    assert AutoConfig.from_pretrained(tmp_path / "m").image_grid_pinpoints == [[56, 112], [112, 56], [112, 112]]
    assert (
        processor.tokenizer.apply_chat_template(
            [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], tokenize=False, add_generation_prompt=True
        )
        == "USER: Hi ASSISTANT:"
    )


def test_gemma3_pan_and_scan_is_refused_by_name(tiny_vlms, tmp_path):
    from tunekit.data.mm_plugins import load_plugin
    from tunekit.errors import DataError

    folder = tmp_path / "g3"
    shutil.copytree(tiny_vlms["gemma3"], folder)
    config = json.loads((folder / "processor_config.json").read_text(encoding="utf-8"))
    config["image_processor"]["do_pan_and_scan"] = True
    (folder / "processor_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(DataError) as exc:
        load_plugin(_cfg(folder, "gemma3", tmp_path, tmp_path), "gemma3")
    assert str(exc.value) == (
        f"{folder}: the image processor has do_pan_and_scan: true; tunekit trains Gemma 3 without "
        f"pan-and-scan crops so far: set it to false in the folder's processor config."
    )


@pytest.mark.parametrize("template", ["llava_next", "gemma3"])
def test_dpo_on_images_starts_at_ln2_with_the_familys_extra_inputs(template, tiny_vlms, demo_dir, tmp_path):
    """Both answers follow the same image; LLaVA-NeXT's image_sizes and Gemma 3's token_type_ids reach the model."""
    import math

    from tunekit.data.pipeline import prepare_datasets
    from tunekit.flow import run_train
    from tunekit.model.loader import load_tokenizer
    from tunekit.train.batching import MultimodalPairCollator
    from tunekit.train.stages.reference_policy import media_inputs

    entry = {
        **SHAREGPT,
        "ranking": True,
        "columns": {**SHAREGPT["columns"], "chosen": "chosen", "rejected": "rejected"},
    }
    records = [
        {
            "messages": [{"role": "user", "content": "<image>Who is this?"}],
            "images": [f"mllm_demo_data/{f}"],
            "chosen": {"role": "assistant", "content": good},
            "rejected": {"role": "assistant", "content": bad},
        }
        for f, good, bad in (("1.jpg", "Kane.", "Nobody."), ("3.jpg", "A speech.", "Rain."))
    ]
    data_dir = tmp_path / "data"
    shutil.copytree(demo_dir / "mllm_demo_data", data_dir / "mllm_demo_data")
    write_dataset(data_dir, "toy", records, entry)
    cfg = _cfg(
        tiny_vlms[template],
        template,
        data_dir,
        tmp_path,
        stage="dpo",
        do_train=True,
        finetuning_type="lora",
        per_device_train_batch_size=2,
        max_steps=1,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        gradient_checkpointing=False,
    )
    tok = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tok, "dpo")
    batch = MultimodalPairCollator(pad_token_id=tok.pad_token_id, mm=data.mm)([data.train[0], data.train[1]])
    extra = {"llava_next": "image_sizes", "gemma3": "token_type_ids"}[template]
    assert extra in media_inputs(batch) and len(batch["pixel_values"]) == 4  # rows: chosen 0, 1, rejected 0, 1
    if template == "gemma3":
        assert batch["token_type_ids"].sum(dim=1).tolist() == [4, 4, 4, 4]
    else:  # the original (height, width) of 1.jpg and 3.jpg, which choose the tile grid
        assert batch["image_sizes"].tolist() == [[168, 300], [166, 300], [168, 300], [166, 300]]
    run_train(cfg)
    # step 0: the policy is the reference (LoRA's B = 0), so the sigmoid loss is -log sigmoid(0) = ln 2 (fp32 rounding)
    assert abs(logged_losses(tmp_path / "out")[0] - math.log(2)) < 1e-6


def test_a_folder_without_its_processor_files_is_a_named_error(tiny_vlms, tmp_path):
    from tunekit.data.mm_plugins import load_plugin
    from tunekit.errors import DataError

    folder = tmp_path / "no-processor"
    shutil.copytree(tiny_vlms["llava"], folder)
    (folder / "processor_config.json").unlink()
    with pytest.raises(DataError) as exc:
        load_plugin(_cfg(folder, "llava", tmp_path, tmp_path), "llava")
    assert str(exc.value) == (
        f"{folder} has no image processor (processor_config.json or preprocessor_config.json), which the llava family "
        f"needs: copy the files of the base model's processor into the folder "
        f"(AutoProcessor.from_pretrained(base).save_pretrained(folder))."
    )
