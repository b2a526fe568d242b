"""LLaVA-NeXT on Mistral and on Llama 3 (``llava_next_mistral``, ``llava_next_llama3``): token layout,
labels, chat, template choice.

The reference is the tiny model's own ``LlavaNextProcessor`` (``AutoProcessor`` from the folder, PIL image processor)
with the variant's chat template saved there (Mistral: ``chat_mistral`` of transformers' LLaVA-NeXT conversion;
Llama 3: llava-hf/llama3-llava-next-8b-hf's), through ``processor.apply_chat_template(..., tokenize=True)``: what
the model sees at inference.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import content_parts

TEMPLATE = "llava_next_mistral"
VARIANTS = {"llava_next_mistral": "llava-next-mistral", "llava_next_llama3": "llava-next-llama3"}  # template -> --like


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """template -> its tiny model, built on first use through `tunekit tiny-model --like`."""
    from tunekit.cli.tiny_model_cmd import main as tiny_model

    built: dict[str, Path] = {}

    def get(template: str) -> Path:
        if template not in built:
            out = tmp_path_factory.mktemp(template) / "model"
            assert tiny_model([str(out), "--like", VARIANTS[template]]) == 0
            built[template] = out
        return built[template]

    return get


@pytest.fixture(scope="module")
def tiny_mistral(tiny) -> Path:
    return tiny(TEMPLATE)


def _official(processor, messages, images) -> list[int]:
    inputs = processor.apply_chat_template(
        content_parts(messages, images),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
    )
    return inputs["input_ids"][0].tolist()


def test_the_tiny_model_is_llava_next_on_mistral_with_its_chat_format(tiny_mistral):
    from transformers import AutoConfig, AutoProcessor

    config = AutoConfig.from_pretrained(tiny_mistral)
    assert (config.model_type, config.text_config.model_type) == ("llava_next", "mistral")
    assert config.architectures == ["LlavaNextForConditionalGeneration"]
    processor = AutoProcessor.from_pretrained(tiny_mistral)
    assert type(processor).__name__ == "LlavaNextProcessor"
    conversation = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Yo"}]},
        {"role": "user", "content": [{"type": "text", "text": "Why?"}]},
    ]
    assert (
        processor.apply_chat_template(conversation, tokenize=False)
        == "[INST] <image>\nHi [/INST] Yo<\\s> [INST] Why? [/INST]"
    )


@pytest.mark.parametrize("template", sorted(VARIANTS))
def test_mllm_demo_ids_equal_the_processors_rendering_and_labels_cover_the_replies(template, tiny, demo_dir, tmp_path):
    """Every mllm_demo record (LLaMA-Factory's file, unchanged), turn by turn: the official generation prompt of the
    user message (BOS only in the first), then the reply as trained. Mistral: " reply</s>" (the official template
    writes the literal "<\\s> "); Llama 3: "reply<|eot_id|>" (the official template writes "\\n" before every text
    part, so also before a reply and a text-only message's text: those two carry one "\\n" less here)."""
    from PIL import Image
    from transformers import AutoProcessor

    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    model_dir = tiny(template)
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(model_dir),
            "template": template,
            "dataset": "mllm_demo",
            "dataset_dir": str(demo_dir),
            "output_dir": str(tmp_path / "out"),
            "stage": "sft",
            "cutoff_len": 2048,
            "report_to": "none",
        },
    )
    tok = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tok, "sft")
    assert len(data.train) == 6 and data.reports[0].invalid == 0 and data.reports[0].dropped == 0
    processor = AutoProcessor.from_pretrained(model_dir)
    image_id = tok.convert_tokens_to_ids("<image>")
    llama3 = template == "llava_next_llama3"
    reply = "{}<|eot_id|>" if llama3 else " {}</s>"
    for record, row in zip(json.loads((demo_dir / "mllm_demo.json").read_text(encoding="utf-8")), data.train):
        images = [Image.open(demo_dir / p).convert("RGB") for p in record["images"]]
        ids, labels, msgs = row["input_ids"], row["labels"], record["messages"]
        trained = tok(
            [reply.format(m["content"]) for m in msgs if m["role"] == "assistant"], add_special_tokens=False
        )["input_ids"]
        want, used = [], 0
        for k, user in enumerate(msgs[0::2]):
            n = user["content"].count("<image>")
            prompt = _official(processor, [user], images[used : used + n])
            if llama3 and n == 0:  # the official "<|end_header_id|>\n\n\n" + text of a text-only message
                text = processor.tokenizer.decode(prompt).replace(
                    "user<|end_header_id|>\n\n\n", "user<|end_header_id|>\n\n"
                )
                prompt = tok(text, add_special_tokens=False)["input_ids"]
            assert prompt[0] == tok.bos_token_id
            want += (prompt if k == 0 else prompt[1:]) + trained[k]
            used += n
        assert ids == want
        assert [t for t, label in zip(ids, labels) if label != -100] == [t for r in trained for t in r]
        assert image_id not in labels and ids.count(image_id) > 0


def test_two_text_pieces_around_an_image_join_as_the_official_template_does(tiny_mistral, demo_dir):
    """Mistral's template writes a message's text parts back to back (Vicuna's puts a space after each)."""
    from PIL import Image
    from transformers import AutoProcessor

    from tunekit.config import load_config
    from tunekit.infer.engine import ChatEngine

    image = str(demo_dir / "mllm_demo_data" / "1.jpg")
    engine = ChatEngine(load_config(None, {"model_name_or_path": str(tiny_mistral), "template": TEMPLATE}))
    messages = [{"role": "user", "content": "Look: <image>who is this?"}]
    ids, _ = engine.render_media(messages, [image])
    assert ids == _official(AutoProcessor.from_pretrained(tiny_mistral), messages, [Image.open(image).convert("RGB")])
    assert engine.tokenizer.decode(ids).endswith("<image>\nLook: who is this? [/INST]")


@pytest.mark.parametrize("template", sorted(VARIANTS))
def test_chat_with_an_image_equals_generate_and_the_template_follows_the_folder(template, tiny, demo_dir, tmp_path):
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from tunekit.config import load_config
    from tunekit.errors import ConfigError
    from tunekit.infer.engine import ChatEngine

    image, tiny_mistral = str(demo_dir / "mllm_demo_data" / "2.jpg"), tiny(template)
    # served without a template (an exported folder): the folder's language model and chat template pick the variant
    engine = ChatEngine(
        load_config(None, {"model_name_or_path": str(tiny_mistral), "max_new_tokens": 6, "do_sample": False})
    )
    assert engine.cfg.template == template
    messages = [{"role": "user", "content": "Who is this?"}]
    (reply,) = engine.chat(messages, images=[image])
    processor = AutoProcessor.from_pretrained(tiny_mistral)
    inputs = processor.apply_chat_template(
        content_parts([{"role": "user", "content": "<image>Who is this?"}], [Image.open(image).convert("RGB")]),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
    )
    assert engine.render_media(messages, [image])[0] == inputs["input_ids"][0].tolist()
    model = AutoModelForImageTextToText.from_pretrained(tiny_mistral).eval()
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=6, do_sample=False)  # the folder's generation_config
    new = out[0, inputs["input_ids"].shape[1] :].tolist()
    assert reply.text == engine.decode(new[: next((i for i, t in enumerate(new) if t in engine.stop_ids), len(new))])
    assert reply.completion_tokens > 0
    # the Vicuna template on this folder is refused, naming the template of its language model and chat template
    with pytest.raises(ConfigError) as err:
        ChatEngine(load_config(None, {"model_name_or_path": str(tiny_mistral), "template": "llava_next"}))
    text_type = "mistral" if template == "llava_next_mistral" else "llama"
    assert str(err.value) == (
        f"template 'llava_next' is the chat format of LLaVA-NeXT on llama (Vicuna), but "
        f"{tiny_mistral} is LLaVA-NeXT on {text_type} whose chat template is not that one: set "
        f"template: {template}."
    )
