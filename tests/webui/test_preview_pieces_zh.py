"""The rendered-samples preview says a run of media tokens in the board's language: ``<image> × 3 tokens`` on the
English board, ``<image> × 3 个 token`` on the Chinese one (the placeholder and the count as the data layer gives
them, ``data.preview``)."""

from __future__ import annotations

from tunekit.config import load_config
from tunekit.data.preview import _pieces
from tunekit.model.loader import load_tokenizer
from tunekit.webui.media import preview_pieces


def _sample(tiny_qwen):
    """A sample of the data layer: a prompt, three image tokens (trained: no), then a trained reply and two more."""
    tok = load_tokenizer(load_config(None, {"model_name_or_path": str(tiny_qwen), "template": "qwen"}))
    image = tok.pad_token_id  # a text model's tokenizer: its pad token stands for the image placeholder here
    prompt, reply = tok.encode("Look:", add_special_tokens=False), tok.encode(" A cat.", add_special_tokens=False)
    ids = prompt + [image] * 3 + reply + [image] * 2
    labels = [-100] * (len(prompt) + 3) + reply + [-100] * 2
    return _pieces(ids, labels, tok, {image: "<image>"}), tok.decode(prompt), tok.decode(reply)


def test_a_run_of_media_tokens_is_said_in_the_boards_language(tiny_qwen):
    sample, prompt, reply = _sample(tiny_qwen)
    assert sample.media_tokens == [("<image>", 3), ("<image>", 2)]
    assert preview_pieces(sample, "en") == [
        (prompt, None),
        ("<image> × 3 tokens", "media"),
        (reply, "trained"),
        ("<image> × 2 tokens", "media"),
    ]
    assert preview_pieces(sample, "zh") == [
        (prompt, None),
        ("<image> × 3 个 token", "media"),
        (reply, "trained"),
        ("<image> × 2 个 token", "media"),
    ]
    assert [text for text, _trained, _media in sample.pieces] == [text for text, _label in preview_pieces(sample)]
