"""chat --image, the API's image content parts and predict for LLaVA-1.5, LLaVA-NeXT, Gemma 3 and Qwen3-VL.

Each family's tiny random model (``build_tiny_vlm``) answers an image prompt through tunekit's three serving paths, and
each must equal plain transformers, with no tunekit code in the reference:

- LLaVA-1.5 / LLaVA-NeXT / Gemma 3: the family's own processor (``AutoProcessor`` from the folder:
  ``LlavaProcessor``, ``LlavaNextProcessor``, ``Gemma3Processor``), ``processor.apply_chat_template(...,
  tokenize=True, return_dict=True)`` with the official chat template saved in the folder, then greedy
  ``model.generate`` on those inputs;
- Qwen3-VL (whose processor class needs torchvision): the folder's official chat template rendered by the tokenizer,
  ``<|image_pad|>`` repeated grid / merge² times (``Qwen3VLProcessor.replace_image_token``'s rule), the PIL image
  processor's pixels, greedy ``generate``.

The prompt ids, the number of reply tokens and the reply text must be identical on every path.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import REFERENCE_DATA

DEMO = REFERENCE_DATA
#: template -> tiny-model --like
FAMILIES = {"llava": "llava", "llava_next": "llava-next", "gemma3": "gemma3", "qwen3_vl_nothink": "qwen3-vl"}
QWEN3_PIXELS = 64 * 64  # image_max_pixels for Qwen3-VL: 1.jpg -> a few image tokens (the LLaVA families crop to 56 px)
PROMPT = "Who is this?"
NEW = 6


@pytest.fixture(scope="module")
def demo() -> Path:
    if not (DEMO / "mllm_demo_data" / "1.jpg").is_file():
        pytest.skip(f"reference data not found at {DEMO}")
    return DEMO


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Tiny models built on first use (a worker of pytest-xdist builds only the families its tests need)."""
    from tunekit.tiny.vlm import build_tiny_vlm

    root, built = tmp_path_factory.mktemp("serving-families"), {}

    def get(template: str) -> Path:
        if template not in built:
            built[template] = build_tiny_vlm(root / template, like=FAMILIES[template], seed=0)
        return built[template]

    return get


def _options(template: str) -> dict:
    return {"image_max_pixels": QWEN3_PIXELS} if template.startswith("qwen3_vl") else {}


def _engine(model_dir: Path, template: str):
    from tunekit.config import load_config
    from tunekit.infer.engine import ChatEngine

    return ChatEngine(
        load_config(
            None,
            dict(
                model_name_or_path=str(model_dir),
                template=template,
                max_new_tokens=NEW,
                do_sample=False,
                **_options(template),
            ),
        )
    )


def _qwen3_inputs(model_dir: Path, conversation: list[dict], images: list) -> dict:
    """Qwen3VLProcessor's rendering without the class: official template, <|image_pad|> × grid / merge², pixels."""
    import torch
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tok = AutoTokenizer.from_pretrained(model_dir)
    processor = Qwen2VLImageProcessorPil.from_pretrained(model_dir)
    text = tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    pixels = (
        processor(images=images, return_tensors="pt", size={"shortest_edge": 28 * 28, "longest_edge": QWEN3_PIXELS})
        if images
        else {}
    )
    pad = "<|image_pad|>"
    pieces = text.split(pad)
    assert len(pieces) == len(images) + 1
    counts = [int(g.prod()) // processor.merge_size**2 for g in pixels.get("image_grid_thw", [])]
    ids = tok(pieces[0] + "".join(pad * n + rest for n, rest in zip(counts, pieces[1:])), add_special_tokens=False)[
        "input_ids"
    ]
    x = torch.tensor([ids])
    return dict(
        input_ids=x,
        attention_mask=torch.ones_like(x),
        pixel_values=pixels["pixel_values"],
        image_grid_thw=pixels["image_grid_thw"],
        mm_token_type_ids=(x == tok.convert_tokens_to_ids(pad)).long(),
    )


def _official(model_dir: Path, template: str, image_path: Path, text: str = PROMPT) -> tuple[list[int], list[int]]:
    """(prompt ids, greedy reply ids) of plain transformers for one user turn: an image, then ``text``."""
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor, GenerationConfig

    image = Image.open(image_path).convert("RGB")
    if template.startswith("qwen3_vl"):
        inputs = _qwen3_inputs(
            model_dir, [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}], [image]
        )
    else:
        processor = AutoProcessor.from_pretrained(model_dir)
        conversation = [
            {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}
        ]
        inputs = processor.apply_chat_template(
            conversation, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
        )
    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    stops = GenerationConfig.from_pretrained(model_dir).eos_token_id  # the folder's own end tokens
    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=NEW,
            do_sample=False,
            eos_token_id=stops,
            pad_token_id=GenerationConfig.from_pretrained(model_dir).pad_token_id,
        )
    prompt = inputs["input_ids"][0].tolist()
    return prompt, out[0, len(prompt) :].tolist()


def _reply_text(engine, ids: list[int]) -> str:
    stops = set(engine.stop_ids)
    kept = ids[: next((i for i, t in enumerate(ids) if t in stops), len(ids))]
    return engine.decode(kept)


def _data_url(path: Path) -> str:
    return f"data:image/jpeg;base64,{base64.b64encode(path.read_bytes()).decode()}"


@pytest.mark.parametrize("template", sorted(FAMILIES))
def test_chat_and_api_with_an_image_equal_plain_transformers(template, models, demo, monkeypatch):
    from starlette.testclient import TestClient

    from tunekit.serve.app import Limits, create_app

    model_dir, image = models(template), demo / "mllm_demo_data" / "1.jpg"
    want_prompt, want_reply = _official(model_dir, template, image)
    engine = _engine(model_dir, template)
    assert set(engine.stop_ids) >= set(json.loads((model_dir / "generation_config.json").read_text())["eos_token_id"])
    # `tunekit chat --image` (and the REPL's /image): ChatEngine with the image
    ids, media = engine.render_media([{"role": "user", "content": PROMPT}], [str(image)])
    assert ids == want_prompt
    (chat,) = engine.chat([{"role": "user", "content": PROMPT}], images=[str(image)])
    want_text = _reply_text(engine, want_reply)
    assert chat.text == want_text
    assert chat.completion_tokens == len(want_reply) and chat.completion_tokens > 0
    # `tunekit api`: an OpenAI image_url part with a base64 image, then the text
    monkeypatch.delenv("SAFE_MEDIA_PATH", raising=False)
    app = create_app(engine, "tiny", max_body_bytes=2_000_000, limits=Limits.from_config(engine.cfg))
    message = {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": _data_url(image)}}, {"type": "text", "text": PROMPT}],
    }
    with TestClient(app) as client:
        resp = client.post("/v1/chat/completions", json={"model": "tiny", "messages": [message], "temperature": 0})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["choices"][0]["message"]["content"] == want_text
    assert body["usage"]["prompt_tokens"] == len(want_prompt)
    assert body["usage"]["completion_tokens"] == len(want_reply)


SHAREGPT = {
    "formatting": "sharegpt",
    "columns": {"messages": "messages", "images": "images"},
    "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
}


@pytest.mark.parametrize("template", sorted(FAMILIES))
def test_predict_on_image_records_equals_plain_transformers(template, models, demo, tmp_path):
    from tunekit.cli.predict_cmd import main

    model_dir, data = models(template), tmp_path / "data"
    shutil.copytree(
        demo / "mllm_demo_data",
        data / "mllm_demo_data",
        ignore=shutil.ignore_patterns("*.mp*", "*.avi", "*.wav", "*.flac"),
    )
    records = [
        {
            "messages": [{"role": "user", "content": f"<image>{q}"}, {"role": "assistant", "content": a}],
            "images": [f"mllm_demo_data/{name}"],
        }
        for name, q, a in (("1.jpg", "Who are they?", "Kane and Gretzka."), ("2.jpg", "Who is he?", "Muller."))
    ]
    (data / "toy.json").write_text(json.dumps(records), encoding="utf-8")
    (data / "dataset_info.json").write_text(
        json.dumps({"toy": {"file_name": "toy.json", **SHAREGPT}}), encoding="utf-8"
    )
    args = dict(
        model_name_or_path=model_dir,
        template=template,
        dataset_dir=data,
        eval_dataset="toy",
        do_sample="false",
        max_new_tokens=NEW,
        cutoff_len=2048,
        output_dir=tmp_path / "out",
        disable_tqdm="true",
        per_device_eval_batch_size=2,
        **_options(template),
    )
    assert main([f"{k}={v}" for k, v in args.items()]) == 0
    rows = [json.loads(x) for x in (tmp_path / "out" / "generated_predictions.jsonl").read_text().splitlines()]
    engine = _engine(model_dir, template)
    assert len(rows) == 2
    for row, record in zip(rows, records):
        prompt, reply = _official(
            model_dir, template, data / record["images"][0], record["messages"][0]["content"][7:]
        )
        assert row["prompt"] == engine.tokenizer.decode(prompt)
        assert (row["predict"], row["label"]) == (_reply_text(engine, reply), record["messages"][1]["content"])


# --- an exported folder served without a template, or with template: jinja (the folder's own chat template) --------


def test_a_vlm_folder_served_without_template_takes_its_familys_template(models, demo):
    """An exported LLaVA-NeXT folder (the tiny folder is one: weights, processor files, official chat template) served
    with no template gets llava_next, so its images expand as the processor does (jinja dropped LLaVA's text parts)."""
    from tunekit.config import load_config
    from tunekit.infer.engine import ChatEngine

    model_dir, image = models("llava_next"), demo / "mllm_demo_data" / "1.jpg"
    engine = ChatEngine(
        load_config(None, dict(model_name_or_path=str(model_dir), max_new_tokens=NEW, do_sample=False))
    )
    assert engine.cfg.template == "llava_next" and engine.mm.NAME == "llava_next"
    want_prompt, want_reply = _official(model_dir, "llava_next", image)
    assert engine.render_media([{"role": "user", "content": PROMPT}], [str(image)])[0] == want_prompt
    assert (
        engine.tokenizer.decode(engine.render([{"role": "user", "content": PROMPT}]))
        == "<s>USER: Who is this? ASSISTANT:"
    )


@pytest.mark.parametrize("template, options", [("qwen3_vl_nothink", {}), ("gemma3", {"template": "jinja"})])
def test_template_jinja_on_a_vlm_folder_refuses_images_naming_the_template_to_set(
    template, options, models, demo, monkeypatch
):
    """Qwen3-VL has two templates (thinking / no thinking), so a folder served without one renders with its own chat
    template as text; an explicit template: jinja does too. Images are refused, naming the template(s) to set."""
    from starlette.testclient import TestClient

    from tunekit.config import load_config
    from tunekit.errors import ConfigError
    from tunekit.infer.engine import ChatEngine
    from tunekit.serve.app import Limits, create_app

    model_dir, image = models(template), demo / "mllm_demo_data" / "1.jpg"
    engine = ChatEngine(load_config(None, dict(model_name_or_path=str(model_dir), max_new_tokens=NEW, **options)))
    assert engine.cfg.template == "jinja" and engine.mm is None
    model_type, names = {
        "qwen3_vl_nothink": ("qwen3_vl", "template: qwen3_vl or template: qwen3_vl_nothink"),
        "gemma3": ("gemma3", "template: gemma3"),
    }[template]
    why = (
        f"template 'jinja' (the folder's own chat template) renders text only and does not expand images; {model_dir} "
        f"is a vision-language model (model_type '{model_type}'): set {names}, whose prompts are the official chat "
        f"template's with each image expanded as the model's processor does."
    )
    with pytest.raises(ConfigError) as err:
        engine.render_media([{"role": "user", "content": PROMPT}], [str(image)])
    assert str(err.value) == why
    monkeypatch.delenv("SAFE_MEDIA_PATH", raising=False)
    message = {
        "role": "user",
        "content": [{"type": "text", "text": PROMPT}, {"type": "image_url", "image_url": {"url": _data_url(image)}}],
    }
    with TestClient(create_app(engine, "tiny", limits=Limits.from_config(engine.cfg))) as client:
        resp = client.post("/v1/chat/completions", json={"model": "tiny", "messages": [message]})
    assert (resp.status_code, resp.json()["error"]["message"]) == (400, f"messages[0].content[1]: {why}")
