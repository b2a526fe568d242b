"""tunekit api with images: OpenAI content parts on a tiny Qwen2-VL through the official openai client.

The reference is plain transformers: the model's own chat template (saved with the tiny model) with its
``<|image_pad|>`` repeated as the image processor's grid says (what ``Qwen2VLProcessor`` does), the image processor's
pixels and ``model.generate`` greedy; and the ``tunekit chat --image`` path (``ChatEngine.chat(images=...)``).
"""

from __future__ import annotations

import base64
import io
import json
import os
from pathlib import Path

import pytest

from tests.helpers import REFERENCE_DATA, serve_in_thread

MODEL = "tiny-vl"
SMALL = 28 * 28 * 16  # image_max_pixels: 1.jpg (300x168) -> grid 1x4x10 -> 10 image tokens
DEMO = REFERENCE_DATA / "mllm_demo_data"
PROMPT = "Who is this?"


@pytest.fixture(scope="module")
def tiny_vl(tmp_path_factory) -> Path:
    from tunekit.tiny.vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen2-vl") / "model", like="qwen2-vl", seed=0)


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, Path]:
    """The allowed folder (a PNG, a symlink that leads out of it), a file outside it, and the scratch folder."""
    from PIL import Image

    if not (DEMO / "1.jpg").is_file():
        pytest.skip(f"reference data not found at {DEMO}")
    root = tmp_path_factory.mktemp("api-media")
    allowed, outside, scratch = root / "allowed", root / "outside", root / "scratch"
    for d in (allowed, outside, scratch):
        d.mkdir()
    buf = io.BytesIO()
    Image.open(DEMO / "1.jpg").convert("RGB").save(buf, format="PNG")
    (allowed / "1.png").write_bytes(buf.getvalue())
    (outside / "secret.png").write_bytes(buf.getvalue())
    (allowed / "link.png").symlink_to(outside / "secret.png")
    return {"allowed": allowed, "outside": outside, "scratch": scratch, "png": allowed / "1.png"}


@pytest.fixture(scope="module")
def engine(tiny_vl, media):
    from tunekit.config import load_config
    from tunekit.infer.engine import ChatEngine

    return ChatEngine(
        load_config(
            None,
            dict(
                model_name_or_path=str(tiny_vl),
                template="qwen2_vl",
                image_max_pixels=SMALL,
                image_min_pixels=32 * 32,
                max_new_tokens=6,
                do_sample=False,
                api_media_dir=str(media["allowed"]),
            ),
        )
    )


def _limits(engine, media, **options):
    from tunekit.serve.app import Limits

    with pytest.MonkeyPatch.context() as mp:  # LLaMA-Factory's variable must not widen what the test allows
        mp.delenv("SAFE_MEDIA_PATH", raising=False)
        limits = Limits.from_config(engine.cfg.model_copy(update=options))
    limits.media = type(limits.media)(limits.media.folder, limits.media.max_bytes, scratch=media["scratch"])
    return limits


@pytest.fixture(scope="module")
def server(engine, media):
    from tunekit.serve.app import create_app

    yield from serve_in_thread(create_app(engine, MODEL, max_body_bytes=2_000_000, limits=_limits(engine, media)))


@pytest.fixture(scope="module")
def strict_server(engine, media):
    """The same model with no api_media_dir and a 10 kB media limit (1.png is 65 kB)."""
    from tunekit.serve.app import create_app

    limits = _limits(engine, media, api_media_dir=None, api_max_media_mb=0.01)
    yield from serve_in_thread(create_app(engine, MODEL, max_body_bytes=2_000_000, limits=limits))


def _data_url(path: Path, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def _image_message(url: str, text: str = PROMPT) -> list[dict]:
    return [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}]}
    ]


def _transformers_reply(model_dir: Path, image: Path, cfg, max_new_tokens: int) -> tuple[str, int]:
    """Greedy reply and prompt length in plain transformers: official chat template + image processor + generate."""
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tok = AutoTokenizer.from_pretrained(model_dir)
    processor = Qwen2VLImageProcessorPil.from_pretrained(model_dir)
    pixels = processor(
        images=[Image.open(image).convert("RGB")],
        return_tensors="pt",
        size={"shortest_edge": cfg.image_min_pixels, "longest_edge": cfg.image_max_pixels},
    )
    n = int(pixels["image_grid_thw"][0].prod()) // processor.merge_size**2
    text = tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text.count("<|image_pad|>") == 1 and n == 10
    ids = torch.tensor(
        [tok(text.replace("<|image_pad|>", "<|image_pad|>" * n), add_special_tokens=False)["input_ids"]]
    )
    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            pixel_values=pixels["pixel_values"],
            image_grid_thw=pixels["image_grid_thw"],
            mm_token_type_ids=(ids == tok.convert_tokens_to_ids("<|image_pad|>")).long(),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=[tok.eos_token_id],
            pad_token_id=tok.pad_token_id,
        )
    return tok.decode(out[0, ids.shape[1] :].tolist(), skip_special_tokens=True), ids.shape[1]


def test_a_base64_image_through_the_openai_client_answers_as_chat_and_transformers(server, engine, tiny_vl, media):
    from openai import OpenAI

    client = OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120)
    resp = client.chat.completions.create(model=MODEL, messages=_image_message(_data_url(media["png"])), temperature=0)
    reply = resp.choices[0].message.content
    want, prompt_len = _transformers_reply(tiny_vl, media["png"], engine.cfg, 6)
    assert reply == want and len(reply) > 2
    assert resp.usage.prompt_tokens == prompt_len and resp.usage.completion_tokens == 6
    (chat,) = engine.chat([{"role": "user", "content": PROMPT}], images=[str(media["png"])])  # `tunekit chat --image`
    assert chat.text == reply
    # streamed, and from a file under api_media_dir (relative path, file:// URL): the same reply
    chunks = client.chat.completions.create(model=MODEL, messages=_image_message("1.png"), temperature=0, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == reply
    by_url = client.chat.completions.create(model=MODEL, messages=_image_message(media["png"].as_uri()), temperature=0)
    assert by_url.choices[0].message.content == reply
    # the image is read: another image gives another reply
    other = (
        client.chat.completions.create(
            model=MODEL, messages=_image_message(_data_url(DEMO / "2.jpg", "image/jpeg")), temperature=0
        )
        .choices[0]
        .message.content
    )
    assert other != reply
    assert list(media["scratch"].iterdir()) == []  # decoded uploads are deleted once the prompt is rendered


def test_client_text_is_never_a_placeholder_or_a_control_token(engine, media):
    """`<image>` typed by a client stays text; `<|image_pad|>` typed by a client is not an image token."""
    from tunekit.infer.media_prompt import MediaFile, render_parts

    image = MediaFile("images", str(media["png"]), "messages[0].content[1]")
    ids, inputs = render_parts(engine, [{"role": "user", "content": ["<image> and <|image_pad|>: ", image, PROMPT]}])
    pad = engine.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert ids.count(pad) == 10 and inputs["image_grid_thw"].tolist() == [[1, 4, 10]]
    text = engine.tokenizer.decode(ids)
    assert "<image> and <|image_pad|>: <|vision_start|>" + "<|image_pad|>" * 10 + "<|vision_end|>Who is this?" in text
    with pytest.raises(Exception, match=r"the prompt holds 11 media tokens but its media need 10"):
        render_parts(engine, [{"role": "user", "content": ["<|image_pad|>", image]}], parse_special_tokens=True)


REFUSALS = [
    # (server, content part, status, exact message)
    (
        "open",
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        400,
        "messages[0].content[0]: https URLs are refused: tunekit api fetches nothing from the network. Send the image "
        "inline "
        "as a data: URL (base64), or as a file under api_media_dir.",
    ),
    (
        "open",
        {"type": "image_url", "image_url": {"url": "http://127.0.0.1:1/x.png"}},
        400,
        "messages[0].content[0]: http URLs are refused: tunekit api fetches nothing from the network. Send the image "
        "inline "
        "as a data: URL (base64), or as a file under api_media_dir.",
    ),
    (
        "open",
        {"type": "image_url", "image_url": {"url": "{outside}/secret.png"}},
        400,
        "messages[0].content[0]: '{outside}/secret.png' is outside the folder this server reads files from (option "
        "api_media_dir; symlinks and .. are resolved first): name a file under that folder.",
    ),
    (
        "open",
        {"type": "image_url", "image_url": {"url": "../outside/secret.png"}},
        400,
        "messages[0].content[0]: '../outside/secret.png' is outside the folder this server reads files from (option "
        "api_media_dir; symlinks and .. are resolved first): name a file under that folder.",
    ),
    (
        "open",
        {"type": "image_url", "image_url": {"url": "link.png"}},
        400,
        "messages[0].content[0]: 'link.png' is outside the folder this server reads files from (option "
        "api_media_dir; symlinks and .. are resolved first): name a file under that folder.",
    ),
    (
        "open",
        {"type": "image_url", "image_url": {"url": "missing.png"}},
        400,
        "messages[0].content[0]: 'missing.png' is not a file under api_media_dir.",
    ),
    (
        "open",
        {"type": "image_url", "image_url": {"url": "ftp://host/x.png"}},
        400,
        "messages[0].content[0]: URLs of scheme 'ftp' are not read: send a data: URL (base64) or a file path under "
        "api_media_dir.",
    ),
    (
        "open",
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"not a png").decode()},
        },
        400,
        "messages[0].content[0]: the image cannot be decoded (UnidentifiedImageError: cannot identify image file): it "
        "is corrupt or not an image; send a PNG, JPEG, WebP, GIF or BMP image.",
    ),
    (
        "open",
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@@"}},
        400,
        "messages[0].content[0]: the image data is not valid base64.",
    ),
    (
        "open",
        {"type": "image_url", "image_url": {"url": "data:text/plain;base64,aGk="}},
        400,
        "messages[0].content[0]: this part carries an image, but its data URL is of type 'text/plain': send "
        "data:image/<type>;base64,<data>.",
    ),
    (
        "open",
        {"type": "image_url", "image_url": {"url": "data:image/png,rawbytes"}},
        400,
        "messages[0].content[0]: a data URL must be base64: data:image/<type>;base64,<data>.",
    ),
    (
        "open",
        {"type": "image_url"},
        400,
        "messages[0].content[0]: the image_url part has no image_url.url: send a data: URL (base64) or a file path.",
    ),
    (
        "open",
        {"type": "input_audio", "input_audio": {"data": "aGk=", "format": "wav"}},
        400,
        "messages[0].content[0]: the qwen2_vl family reads images and videos only, not audio. Remove the audio, or "
        "serve a "
        "model of a family that reads audio.",
    ),
    (
        "open",
        {"type": "file", "file": {"file_id": "f"}},
        400,
        "messages[0]: content part of type 'file' is not supported here (text, image_url, video_url, input_audio; a "
        "text "
        "part needs 'text').",
    ),
    (
        "strict",
        {"type": "image_url", "image_url": {"url": "1.png"}},
        400,
        "messages[0].content[0]: local files are refused: this server reads no file unless the option api_media_dir "
        "names "
        "the folder clients may read from. Send the image inline as a data: URL (base64), or start the server with "
        "api_media_dir=FOLDER.",
    ),
    (
        "strict",
        {"type": "image_url", "image_url": {"url": "{png_data}"}},
        413,
        "messages[0].content[0]: the image is {png_mb} MB decoded, larger than this server's limit of 0.01 MB (option "
        "api_max_media_mb): send a smaller image.",
    ),
]


def test_every_refusal_is_named(server, strict_server, media):
    import httpx

    png = media["png"]
    fill = {"outside": str(media["outside"]), "png_data": _data_url(png), "png_mb": f"{png.stat().st_size / 1e6:.1f}"}
    for which, template, status, message in REFUSALS:
        part = {
            k: ({kk: vv.format(**fill) for kk, vv in v.items()} if isinstance(v, dict) else v)
            for k, v in template.items()
        }
        body = {"model": MODEL, "messages": [{"role": "user", "content": [part, {"type": "text", "text": "hi"}]}]}
        r = httpx.post(f"{server if which == 'open' else strict_server}/v1/chat/completions", json=body, timeout=60)
        assert (r.status_code, r.json()["error"]["message"]) == (status, message.format(**fill)), part
    # media only in user messages
    body = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "1.png"}}]},
            {"role": "user", "content": "hi"},
        ],
    }
    r = httpx.post(f"{server}/v1/chat/completions", json=body, timeout=60)
    assert (r.status_code, r.json()["error"]["message"]) == (
        400,
        "messages[0]: content part of type 'image_url' is not "
        "supported here (user messages only; a text part needs 'text').",
    )
    # a body over the limit is refused before it is parsed; the message says media count in it
    big = {"model": MODEL, "messages": _image_message("data:image/png;base64," + "A" * 2_000_000)}
    r = httpx.post(
        f"{server}/v1/chat/completions",
        content=json.dumps(big),
        timeout=60,
        headers={"content-type": "application/json"},
    )
    length = int(r.request.headers["content-length"])
    assert (r.status_code, r.json()["error"]["message"]) == (
        413,
        (
            f"Request body of {length:,} bytes is larger than the limit of 2,000,000 bytes (base64 media count in it: "
            "each "
            "image, video or audio may be up to 20 MB decoded, option api_max_media_mb); send less, or start the "
            "server "
            f"with a larger --max-body-mb."
        ),
    )
    assert list(media["scratch"].iterdir()) == []


def test_images_to_a_text_only_model_are_refused_before_decoding(tiny_qwen, tmp_path):
    import httpx

    from tunekit.config import load_config
    from tunekit.infer.engine import ChatEngine
    from tunekit.serve.app import create_app

    engine = ChatEngine(load_config(None, dict(model_name_or_path=str(tiny_qwen), template="qwen", max_new_tokens=2)))
    server = serve_in_thread(create_app(engine, MODEL))
    url = next(server)
    try:  # the data is not even base64: the model is refused first
        body = {
            "model": MODEL,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "hi"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}},
                    ],
                }
            ],
        }
        r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
        assert (r.status_code, r.json()["error"]["message"]) == (
            400,
            (
                "messages[0].content[1]: this model (template 'qwen') is text only and cannot read images: use a "
                "vision-language model with its multimodal template (qwen2_vl, qwen3_vl, llava, llava_next, gemma3, "
                "smolvlm; "
                "qwen2_audio for audio), or remove the images."
            ),
        )
    finally:
        server.close()


def test_media_options_and_llamafactory_safe_media_path(tmp_path, monkeypatch):
    from tunekit.config import load_config
    from tunekit.errors import ConfigError
    from tunekit.serve.media import MediaPolicy

    monkeypatch.delenv("SAFE_MEDIA_PATH", raising=False)
    cfg = load_config(None, {"model_name_or_path": "m"})
    assert MediaPolicy.from_config(cfg) == MediaPolicy(None, 20_000_000)
    assert MediaPolicy(None, 3).body_bytes(10) == 14  # base64 of 3 bytes is 4
    monkeypatch.setenv("SAFE_MEDIA_PATH", str(tmp_path))
    assert MediaPolicy.from_config(cfg).folder == Path(os.path.realpath(tmp_path))
    with pytest.raises(
        ConfigError, match=r"api_media_dir '.*nowhere' is not a folder: create it, or unset api_media_dir"
    ):
        MediaPolicy.from_config(cfg.model_copy(update={"api_media_dir": str(tmp_path / "nowhere")}))


def test_a_video_part_answers_as_the_training_expansion(server, engine):
    """``video_url`` (base64 mp4) on Qwen2-VL: the prompt is the training/predict rendering of ``<video>`` + text."""
    pytest.importorskip("av")
    from openai import OpenAI

    from tunekit.infer.media_prompt import render_sample

    video = DEMO / "4.mp4"
    client = OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120)
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": PROMPT},
                {"type": "video_url", "video_url": {"url": _data_url(video, "video/mp4")}},
            ],
        }
    ]
    resp = client.chat.completions.create(model=MODEL, messages=messages, temperature=0)
    ids, inputs = render_sample(
        engine, [{"role": "user", "content": PROMPT + "<video>"}], None, None, {"videos": [str(video)]}, "record"
    )
    assert inputs["video_grid_thw"].shape[0] == 1 and resp.usage.prompt_tokens == len(ids) > 100
    (want,) = engine.generate_batch([ids], media=inputs)
    assert resp.choices[0].message.content == want.text


def test_an_input_audio_part_answers_as_qwen2_audio_processor(tmp_path):
    """OpenAI's ``input_audio`` (base64 wav) on Qwen2-Audio: reply = transformers' own processor + generate."""
    av = pytest.importorskip("av")
    import numpy as np
    import torch
    from openai import OpenAI
    from transformers import (
        AutoTokenizer,
        Qwen2AudioForConditionalGeneration,
        Qwen2AudioProcessor,
        WhisperFeatureExtractor,
    )

    from tunekit.config import load_config
    from tunekit.infer.engine import ChatEngine
    from tunekit.serve.app import create_app
    from tunekit.tiny.vlm import build_tiny_vlm

    wav = DEMO / "2.wav"
    if not wav.is_file():
        pytest.skip(f"reference data not found at {DEMO}")
    model_dir = build_tiny_vlm(tmp_path / "model", like="qwen2-audio", seed=0)
    engine = ChatEngine(
        load_config(
            None, dict(model_name_or_path=str(model_dir), template="qwen2_audio", max_new_tokens=5, do_sample=False)
        )
    )
    server = serve_in_thread(create_app(engine, MODEL, max_body_bytes=2_000_000))
    url = next(server)
    try:
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
        data = base64.b64encode(wav.read_bytes()).decode()
        messages = [
            {
                "role": "user",
                "content": [
                    {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}},
                    {"type": "text", "text": "What can you hear?"},
                ],
            }
        ]
        resp = client.chat.completions.create(model=MODEL, messages=messages, temperature=0)
    finally:
        server.close()
    with av.open(str(wav)) as c:  # 2.wav is mono 16 kHz s16: the samples / 32768
        audio = np.concatenate([f.to_ndarray() for f in c.decode(c.streams.audio[0])], axis=1)[0] / 32768.0
    tok = AutoTokenizer.from_pretrained(model_dir)
    processor = Qwen2AudioProcessor(
        feature_extractor=WhisperFeatureExtractor.from_pretrained(model_dir), tokenizer=tok
    )
    text = processor.apply_chat_template(
        [
            {
                "role": "user",
                "content": [{"type": "audio", "audio_url": "x"}, {"type": "text", "text": "What can you hear?"}],
            }
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    inputs = processor(text=[text], audio=[audio], sampling_rate=16000, return_tensors="pt")
    model = Qwen2AudioForConditionalGeneration.from_pretrained(model_dir).eval()
    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=5,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
            eos_token_id=[tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id],
        )
    assert resp.usage.prompt_tokens == inputs["input_ids"].shape[1] > 70
    assert resp.choices[0].message.content == tok.decode(
        out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True
    )
