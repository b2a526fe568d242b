"""SmolVLM / Idefics3 on tiny random models of the real transformers classes.

The reference for the token layout is transformers' own processing of the family:

- ``model_type idefics3`` (Idefics3-8B, SmolVLM-256M/500M/2.2B-Instruct): ``Idefics3Processor`` loaded from the tiny
  model's folder with ``AutoProcessor``, run through ``processor.apply_chat_template(..., tokenize=True)`` with the
  chat template saved there;
- ``model_type smolvlm`` (SmolVLM2): ``SmolVLMProcessor`` cannot be built without torchvision in transformers 5.24,
  so the reference is what its ``__call__`` does: the folder's chat template rendered by the tokenizer, each
  ``<image>`` replaced by ``processing_smolvlm.get_image_prompt_string`` for the rows/cols the folder's image
  processor gives, then tokenized.
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
LIKES = ("smolvlm", "idefics3")  # tiny-model --like -> model_type smolvlm / idefics3; both use template smolvlm


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    from tunekit.tiny.vlm import build_tiny_vlm

    root = tmp_path_factory.mktemp("tiny-smolvlm")
    return {like: build_tiny_vlm(root / like, like=like, seed=0) for like in LIKES}


def _cfg(model, data_dir, tmp_path, **opts):
    from tunekit.config import load_config

    base = {
        "model_name_or_path": str(model),
        "template": "smolvlm",
        "dataset": "toy",
        "dataset_dir": str(data_dir),
        "output_dir": str(tmp_path / "out"),
        "stage": "sft",
        "cutoff_len": 1024,
        "report_to": "none",
    }
    return load_config(None, {**base, **opts})


def _reference(model: Path, messages, images, gen: bool = False) -> list[int]:
    """The ids transformers' processing gives the whole conversation at inference (see the module docstring)."""
    cfg = json.loads((model / "config.json").read_text(encoding="utf-8"))
    if cfg["model_type"] == "idefics3":
        from transformers import AutoProcessor

        processor = AutoProcessor.from_pretrained(model)
        assert type(processor).__name__ == "Idefics3Processor"
        out = processor.apply_chat_template(
            content_parts(messages, images),
            add_generation_prompt=gen,
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
        )
        return out["input_ids"][0].tolist()
    from transformers import AutoTokenizer
    from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil
    from transformers.models.smolvlm.processing_smolvlm import get_image_prompt_string

    tok = AutoTokenizer.from_pretrained(model)
    seq_len = json.loads((model / "processor_config.json").read_text(encoding="utf-8"))["image_seq_len"]
    text = tok.apply_chat_template(content_parts(messages, images), add_generation_prompt=gen, tokenize=False)
    grid = SmolVLMImageProcessorPil.from_pretrained(model)(images=[[im] for im in images], return_row_col_info=True)
    pieces = text.split("<image>")
    blocks = [
        get_image_prompt_string(r[0], c[0], seq_len, "<fake_token_around_image>", "<image>", "<global-img>")
        for r, c in zip(grid["rows"], grid["cols"])
    ]
    return tok(pieces[0] + "".join(b + p for b, p in zip(blocks, pieces[1:])), add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("like", LIKES)
def test_demo_dataset_ids_equal_transformers_processing(like, tiny, demo_dir, tmp_path):
    """mllm_demo (LLaMA-Factory's file, unchanged): every record's ids and labels."""
    from PIL import Image

    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    model = tiny[like]
    cfg = _cfg(model, demo_dir, tmp_path, dataset="mllm_demo")
    tok = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tok, "sft")
    assert len(data.train) == 6 and data.reports[0].invalid == 0 and data.reports[0].dropped == 0
    media = data.mm.media_token_ids()
    raw = json.loads((demo_dir / "mllm_demo.json").read_text(encoding="utf-8"))
    for record, row in zip(raw, data.train):
        images = [Image.open(demo_dir / p).convert("RGB") for p in record["images"]]
        ids, labels, msgs = row["input_ids"], row["labels"], record["messages"]
        want = _reference(model, msgs, images)
        # the official template ends every message with "<end_of_utterance>\n"; the "\n" after the last one belongs to
        # a next prompt (docs/architecture.md), so training stops at the marker
        assert ids == want[:-1] and tok.decode(want[-1:]) == "\n"
        replies = [m["content"] for m in msgs if m["role"] == "assistant"]
        trained = tok([" " + r + "<end_of_utterance>" for r in replies], add_special_tokens=False)["input_ids"]
        assert [t for t, label in zip(ids, labels) if label != -100] == [t for r in trained for t in r]
        assert all(label in (-100, t) for t, label in zip(ids, labels)) and not media & set(labels)
        # 2 x 2 tiles + the global image, 4 <image> each, per image (the demo images are 300 x 166..199)
        assert ids.count(tok.convert_tokens_to_ids("<image>")) == 20 * len(images)
        assert ids.count(tok.convert_tokens_to_ids("<global-img>")) == len(images)


def test_each_image_is_split_by_the_image_processor(tiny, demo_dir, tmp_path):
    """The tile grid comes from the processor at its size settings; the block is transformers' own text."""
    from tunekit.data.mm_plugins import load_plugin

    plugin = load_plugin(_cfg(tiny["idefics3"], tmp_path, tmp_path), "smolvlm")
    paths = [str(demo_dir / "mllm_demo_data" / f) for f in ("1.jpg", "2.jpg", "3.jpg")]
    codes = plugin.image_token_counts(paths, "r")
    assert codes == [2002, 2002, 2002]  # rows 2, cols 2: longest edge 300 -> 112, then 56-pixel tiles (2 x 2)
    block = plugin.expand("<image>", codes, 0)[0]
    tile = "<image>" * 4
    assert block == (
        "<fake_token_around_image><row_1_col_1>"
        + tile
        + "<fake_token_around_image><row_1_col_2>"
        + tile
        + "\n<fake_token_around_image><row_2_col_1>"
        + tile
        + "<fake_token_around_image><row_2_col_2>"
        + tile
        + "\n\n<fake_token_around_image><global-img>"
        + tile
        + "<fake_token_around_image>"
    )
    # rows * cols * (image_seq_len + 2) + image_seq_len + 3 media tokens (data/mm_plugins/idefics3.py)
    markers = ("<image>", "<fake_token_around_image>", "<global-img>", "<row_")
    assert sum(block.count(t) for t in markers) == 2 * 2 * (4 + 2) + 4 + 3
    whole = load_plugin(_cfg(tiny["idefics3"], tmp_path, tmp_path, image_max_pixels=40 * 40), "smolvlm")
    assert whole.image_token_counts(paths[:1], "r") == [2002]  # resized up again to the processor's longest edge


def test_text_starting_with_an_image_has_no_space_after_the_role(tmp_path):
    """The official template writes 'User:' + image but 'User: ' + text (for every role)."""
    from tunekit.data.templates import get_template

    tpl = get_template("smolvlm")
    msgs = [
        {"role": "user", "content": "<image>Who?"},
        {"role": "assistant", "content": "Kane."},
        {"role": "user", "content": "And <image>?"},
    ]
    assert tpl.render_prompt(msgs, system="Be brief.") == (
        "<|im_start|>System: Be brief.<end_of_utterance>\nUser:<image>Who?<end_of_utterance>\nAssistant: Kane."
        "<end_of_utterance>\nUser: And <image>?<end_of_utterance>\nAssistant:"
    )
    assert (
        get_template("idefics3").render_prompt(msgs[:1])
        == "<|begin_of_text|>User:<image>Who?<end_of_utterance>\nAssistant:"
    )


# --- what trains ----------------------------------------------------------------------------------------------------

LM_LINEAR = [
    f"model.text_model.layers.{i}.{m}"
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
    f"model.vision_model.encoder.layers.{i}.{m}"
    for i in range(2)
    for m in ("mlp.fc1", "mlp.fc2", "self_attn.k_proj", "self_attn.out_proj", "self_attn.q_proj", "self_attn.v_proj")
]


@pytest.mark.parametrize("like", LIKES)
def test_freeze_options_count_the_intended_parameters_and_lora_targets(like, tiny, tmp_path):
    from tunekit.model.loader import load_model, load_tokenizer

    def load(method, **opts):
        cfg = _cfg(tiny[like], tmp_path, tmp_path, finetuning_type=method, **opts)
        return load_model(cfg, load_tokenizer(cfg))

    def trainable(model) -> int:
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    model = load("full")
    sizes = {
        part: sum(p.numel() for n, p in model.named_parameters() if n.startswith(part))
        for part in ("model.vision_model.", "model.connector.", "model.text_model.", "lm_head.")
    }
    # text (llama, hidden 64, 2 kv heads of 16, mlp 256, vocab 1920): embedding 122880 + 2 x (q/o 2 x 4096 + k/v 2 x
    # 2048 + mlp 3 x 16384 + 2 norms 128 = 61568) + norm 64 = 246080; head 64 x 1920 (untied); vision (32 wide, mlp
    # 64): patch conv 3*14*14*32 + 32 = 18848 + 16 positions x 32 + 2 x (4 x 1056 + 2112 + 2080 + 128 = 8544) + 64 =
    # 36512; connector: one linear 32 * 2² -> 64 without bias = 8192
    assert sizes == {
        "model.vision_model.": 36512,
        "model.connector.": 8192,
        "model.text_model.": 246080,
        "lm_head.": 122880,
    }
    assert sum(sizes.values()) == sum(p.numel() for p in model.parameters())
    lm = sizes["model.text_model."] + sizes["lm_head."]
    assert trainable(model) == lm  # defaults: vision tower and connector frozen
    assert trainable(load("full", freeze_vision_tower=False)) == lm + sizes["model.vision_model."]
    assert (
        trainable(load("full", freeze_multi_modal_projector=False, freeze_language_model=True))
        == sizes["model.connector."]
    )

    def adapted(**opts):
        return sorted(
            {
                n.split(".lora_A")[0].replace("base_model.model.", "")
                for n, p in load("lora", **opts).named_parameters()
                if ".lora_A" in n and p.requires_grad
            }
        )

    assert adapted() == sorted(LM_LINEAR)
    assert adapted(freeze_vision_tower=False) == sorted(LM_LINEAR + VISION_LINEAR)
    assert adapted(freeze_multi_modal_projector=False) == sorted(
        LM_LINEAR + ["model.connector.modality_projection.proj"]
    )


@pytest.mark.parametrize("like", LIKES)
def test_lora_sft_on_images_lowers_the_loss_and_reloads_in_plain_peft(like, tiny, demo_dir, tmp_path):
    from peft import PeftModel
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
    data = tmp_path / "data"
    shutil.copytree(demo_dir / "mllm_demo_data", data / "mllm_demo_data")
    write_dataset(data, "toy", records, SHAREGPT)
    cfg = _cfg(
        tiny[like],
        data,
        tmp_path,
        do_train=True,
        finetuning_type="lora",
        per_device_train_batch_size=2,
        max_steps=3,
        logging_steps=1,
        save_strategy="no",
        learning_rate=2e-2,
        disable_tqdm=True,
        seed=0,
        gradient_checkpointing=False,
        lora_rank=8,
    )
    run_train(cfg)
    out = tmp_path / "out"
    losses = logged_losses(out)
    # the same batch 3 times: ln(vocab 1920) = 7.56 at the start; each step lowers it
    assert len(losses) == 3 and losses[2] < losses[1] < losses[0] - 0.2, losses
    base = AutoModelForImageTextToText.from_pretrained(tiny[like])
    reloaded = PeftModel.from_pretrained(base, out)
    adapted = {n for n, _ in reloaded.named_parameters() if "lora_B" in n}
    assert len(adapted) == len(LM_LINEAR) and all(".text_model." in n for n in adapted)
    assert any(p.abs().sum() > 0 for n, p in reloaded.named_parameters() if "lora_B" in n)  # trained, not the init
    assert (
        type(reloaded.base_model.model).__name__
        == {"smolvlm": "SmolVLMForConditionalGeneration", "idefics3": "Idefics3ForConditionalGeneration"}[like]
    )


def test_tiny_model_cli_builds_both_families(tmp_path, capsys):
    from tunekit.cli.tiny_model_cmd import main as tiny_model

    assert tiny_model([str(tmp_path / "m"), "--like", "smolvlm"]) == 0
    printed = capsys.readouterr().out
    assert "SmolVLMForConditionalGeneration (model_type smolvlm)" in printed
    assert "SmolVLMProcessor + SmolVLMImageProcessor (PIL path); 4 image tokens per image (tile)" in printed
    tok = json.loads((tmp_path / "m" / "tokenizer.json").read_text(encoding="utf-8"))
    added = {t["content"] for t in tok["added_tokens"]}
    assert {
        "<fake_token_around_image>",
        "<image>",
        "<global-img>",
        "<end_of_utterance>",
        "<row_1_col_1>",
        "<row_6_col_6>",
    } <= added


def test_dpo_on_images_trains_the_spaced_replies_and_starts_at_ln2(tiny, demo_dir, tmp_path):
    """Both answers follow the same image prompt ('User:<image>...Assistant:'); each answer is '
    text<end_of_utterance>'."""
    import math

    from tunekit.data.pipeline import prepare_datasets
    from tunekit.flow import run_train
    from tunekit.model.loader import load_tokenizer
    from tunekit.train.batching import MultimodalPairCollator

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
        tiny["smolvlm"],
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
    row = data.train[0]
    assert [t for t in row["chosen_labels"] if t != -100] == tok(" Kane.<end_of_utterance>", add_special_tokens=False)[
        "input_ids"
    ]
    assert tok.decode(row["chosen_input_ids"]).startswith("<|im_start|>User:<fake_token_around_image><row_1_col_1>")
    batch = MultimodalPairCollator(pad_token_id=tok.pad_token_id, mm=data.mm)([data.train[0], data.train[1]])
    # the batch's images (rows chosen 0, 1, rejected 0, 1) as one list of tiles, in order: each image 2 x 2 tiles + the
    # global one, 56 x 56 pixels, none padded
    assert tuple(batch["pixel_values"].shape) == (1, 4 * 5, 3, 56, 56)
    assert tuple(batch["pixel_attention_mask"].shape) == (1, 4 * 5, 56, 56) and bool(
        batch["pixel_attention_mask"].all()
    )
    run_train(cfg)
    # step 0: the policy is the reference (LoRA's B = 0), so the sigmoid loss is -log sigmoid(0) = ln 2 (fp32 rounding)
    assert abs(logged_losses(tmp_path / "out")[0] - math.log(2)) < 1e-6


@pytest.mark.parametrize("like", LIKES)
def test_chat_with_an_image_equals_transformers_inference(like, tiny, demo_dir):
    """`tunekit chat --image` path: prompt ids = transformers' processing; the greedy reply =
    model.generate on them."""
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    from tunekit.config import load_config
    from tunekit.infer.engine import ChatEngine

    model_dir, image = tiny[like], str(demo_dir / "mllm_demo_data" / "2.jpg")
    engine = ChatEngine(
        load_config(
            None,
            {"model_name_or_path": str(model_dir), "template": "smolvlm", "max_new_tokens": 6, "do_sample": False},
        )
    )
    messages = [{"role": "user", "content": "Who is this?"}]
    ids, media = engine.render_media(messages, [image])
    (reply,) = engine.chat(messages, images=[image])
    assert ids == _reference(
        model_dir, [{"role": "user", "content": "<image>Who is this?"}], [Image.open(image).convert("RGB")], gen=True
    )
    from transformers import AutoImageProcessor

    pixels = AutoImageProcessor.from_pretrained(model_dir)(
        images=[[Image.open(image).convert("RGB")]], return_tensors="pt"
    )
    assert torch.equal(media["pixel_values"], pixels["pixel_values"])  # the family's own image processor, 5 tiles
    assert tuple(pixels["pixel_values"].shape) == (1, 5, 3, 56, 56)
    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    with torch.no_grad():
        out = model.generate(
            input_ids=torch.tensor([ids]),
            pixel_values=media["pixel_values"],
            pixel_attention_mask=media["pixel_attention_mask"],
            max_new_tokens=6,
            do_sample=False,
            eos_token_id=engine.stop_ids,
            pad_token_id=engine.pad_id,
        )
    assert reply.text == engine.decode(out[0, len(ids) :].tolist()) and reply.completion_tokens > 0


def test_a_folder_served_without_template_takes_its_familys(tiny, tmp_path):
    from transformers import AutoTokenizer

    from tunekit.config import load_config
    from tunekit.infer.media_prompt import family_template

    folder = tiny["idefics3"]
    cfg = load_config(None, {"model_name_or_path": str(folder)})
    assert family_template(cfg, AutoTokenizer.from_pretrained(folder).chat_template) == "smolvlm"
    from tunekit.data.templates.jinja_export import official_jinja

    assert (
        family_template(cfg, official_jinja("idefics3")) == "idefics3"
    )  # Idefics3-8B-Llama3's template starts with <|begin_of_text|>
