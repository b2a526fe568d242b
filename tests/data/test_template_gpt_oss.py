"""``template: gpt_oss`` (OpenAI harmony) at the token level, against gpt-oss's official chat template
(``data/templates/official_gpt_oss.jinja``, which ``tunekit tiny-model --like gpt-oss`` saves with the tiny gpt-oss)
rendered by ``apply_chat_template`` on the tiny tokenizer with harmony's special tokens.

The official template writes today's date (``strftime_now``), tunekit the day its process first rendered one
(``harmony.today``); both clocks are fixed here to one day, so the comparison cannot straddle midnight. A thought is
the analysis channel, the answer the final channel; the trained reply ends with ``<|return|>``.
"""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from tests.helpers import freeze_harmony_day, official_render, sft_row
from tunekit.data.templates import get_template, list_templates
from tunekit.data.templates.jinja_export import official_jinja
from tunekit.tiny.text import build_tiny_model

IGNORE = -100
SYSTEM = "Answer briefly."
TURNS = [
    {"role": "user", "content": "What is 2 plus 2?"},
    {"role": "assistant", "content": "<think>\nTwo plus two.\n</think>\n\nIt is 4."},
    {"role": "user", "content": "And 3 plus 3?"},
    {"role": "assistant", "content": "<think>\nThree twice.\n</think>\n\n6"},
]
#: the same conversation as the official template reads it: the thought in ``thinking``
HF = [
    TURNS[0],
    {"role": "assistant", "content": "It is 4.", "thinking": "Two plus two."},
    TURNS[2],
    {"role": "assistant", "content": "6", "thinking": "Three twice."},
]


@pytest.fixture(autouse=True)
def fixed_day(monkeypatch):
    freeze_harmony_day(monkeypatch)


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("gptoss") / "model", like="gpt-oss-20b", num_layers=1)


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def test_the_tiny_gpt_oss_carries_the_official_template_and_harmony_stops(gpt_oss):
    tok = AutoTokenizer.from_pretrained(gpt_oss)
    assert tok.chat_template == official_jinja("gpt_oss")
    tpl = get_template("gpt_oss", tok)
    assert tpl.stop_words == ["<|return|>", "<|call|>"] and "<|end|>" not in tpl.stop_words  # <|end|> ends analysis
    assert "gpt_oss" in list_templates() and tpl.chat_template_jinja() is None  # exports keep the folder's own


@pytest.mark.parametrize("system", [None, SYSTEM])
def test_single_turn_with_a_thought_is_the_official_training_rendering(gpt_oss, tmp_path, system):
    sys_msgs = [{"role": "system", "content": system}] if system else []
    row, tok = sft_row(gpt_oss, tmp_path, "gpt_oss", sys_msgs + TURNS[:2])
    ids = official_render(tok, sys_msgs + HF[:2])
    start = len(official_render(tok, sys_msgs + HF[:1], gen=True))
    assert row["input_ids"] == ids and row["labels"] == [IGNORE] * start + ids[start:]
    assert tok.decode(ids[start:]) == (
        "<|channel|>analysis<|message|>Two plus two.<|end|><|start|>assistant<|channel|>final<|message|>It is 4."
        "<|return|>"
    )
    text = official_render(tok, sys_msgs + HF[:1], gen=True, text=True)
    assert "Current date: 2025-08-05\n\nReasoning: medium" in text
    assert ("<|start|>developer<|message|># Instructions\n\nAnswer briefly.\n\n<|end|>" in text) == bool(system)
    assert _ids(tok, get_template("gpt_oss", tok).render_prompt(TURNS[:1], system=system)) == ids[:start]


def test_mask_history_is_the_official_multi_turn_rendering(gpt_oss, tmp_path):
    """Earlier replies as history: the final channel ending with <|end|>, the thought dropped; the last trained."""
    row, tok = sft_row(gpt_oss, tmp_path, "gpt_oss", TURNS, mask_history=True)
    ids = official_render(tok, HF)
    start = len(official_render(tok, HF[:3], gen=True))
    assert row["input_ids"] == ids and row["labels"] == [IGNORE] * start + ids[start:]
    assert "<|channel|>final<|message|>It is 4.<|end|>" in tok.decode(ids) and "Two plus two" not in tok.decode(ids)
    assert _ids(tok, get_template("gpt_oss", tok).render_prompt(TURNS[:3])) == ids[:start]  # chat, api, predict


def test_every_reply_trained_keeps_each_thought_and_the_first_turn_is_the_official_single_turn(gpt_oss, tmp_path):
    row, tok = sft_row(gpt_oss, tmp_path, "gpt_oss", TURNS)
    first = official_render(tok, HF[:2])
    assert row["input_ids"][: len(first)] == first  # the first reply as trained: analysis + final + <|return|>
    trained = [t for t in row["labels"] if t != IGNORE]
    assert tok.decode(trained) == (
        "<|channel|>analysis<|message|>Two plus two.<|end|><|start|>assistant<|channel|>final<|message|>It is 4."
        "<|return|><|channel|>analysis<|message|>Three twice.<|end|><|start|>assistant<|channel|>final<|message|>6"
        "<|return|>"
    )


def test_thinking_off_prompts_the_empty_analysis_message(gpt_oss, tmp_path):
    """enable_thinking: false (LLaMA-Factory's semantics): the thought removed, the empty analysis message is prompt.
    The whole is the official rendering of the reply with an empty ``thinking``."""
    row, tok = sft_row(gpt_oss, tmp_path, "gpt_oss", TURNS[:2], enable_thinking=False)
    ids = official_render(tok, [HF[0], {**HF[1], "thinking": ""}])
    reply = _ids(tok, "<|channel|>final<|message|>It is 4.<|return|>")
    assert row["input_ids"] == ids and row["labels"] == [IGNORE] * (len(ids) - len(reply)) + reply
    prompt = get_template("gpt_oss", tok).render_prompt(TURNS[:1], enable_thinking=False)
    assert prompt.endswith("<|start|>assistant<|channel|>analysis<|message|><|end|><|start|>assistant")


def test_a_reply_without_a_thought_trains_no_analysis_message(gpt_oss, tmp_path):
    plain = [TURNS[0], {"role": "assistant", "content": "It is 4."}]
    row, tok = sft_row(gpt_oss, tmp_path, "gpt_oss", plain)
    assert row["input_ids"] == official_render(tok, plain)
    assert tok.decode([t for t in row["labels"] if t != IGNORE]) == "<|channel|>final<|message|>It is 4.<|return|>"
