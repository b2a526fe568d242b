"""The DeepSeek chat templates at the token level, against the official chat templates (vendored as
``data/templates/official_deepseek.jinja`` / ``official_deepseekr1.jinja``) rendered by ``apply_chat_template`` on a
tiny tokenizer with the family's special tokens (``tunekit.tiny.tokenizer``: DeepSeek's BOS/EOS, V3/R1's role and think
tags).

``deepseek`` (DeepSeek-V2 / V2-Lite chat): tunekit's SFT ids are the official template's, each reply trained from the
end of its inference prompt (``...Assistant:``) through its EOS, the space before it included.

``deepseekr1``: the official generation prompt ends with ``<think>\\n``; a trained reply is what R1 generates after it
(the thought, ``\\n</think>\\n\\n``, the answer, EOS). Earlier replies, untrained (``mask_history``), are rendered as
the official template renders history (without their thought).
"""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from tests.helpers import official_render, sft_row
from tunekit.data.templates import get_template
from tunekit.data.templates.jinja_export import official_jinja
from tunekit.tiny.text import build_tiny_model

IGNORE = -100
SYSTEM = "You are a helpful assistant."
EOS = "<｜end▁of▁sentence｜>"
THOUGHT, ANSWER = "Two plus two.", "It is 4."
TURNS = [
    {"role": "user", "content": "What is 2 plus 2?"},
    {"role": "assistant", "content": f"<think>\n{THOUGHT}\n</think>\n\n{ANSWER}"},
    {"role": "user", "content": "And 3 plus 3?"},
    {"role": "assistant", "content": "<think>\nThree twice.\n</think>\n\n6"},
]


@pytest.fixture(scope="module")
def tokenizer_dirs(tmp_path_factory):
    """Tiny DeepSeek-V2 and DeepSeek-V3 (R1's architecture) models, their tokenizers saved with the official chat
    template of deepseek (V2) and deepseekr1."""
    out = {}
    for like, template in (("deepseek-v2-chat", "deepseek"), ("deepseek-r1", "deepseekr1")):
        out[template] = build_tiny_model(tmp_path_factory.mktemp(template) / "model", like=like, num_layers=1)
        tok = AutoTokenizer.from_pretrained(out[template])
        tok.chat_template = official_jinja(template)
        tok.save_pretrained(out[template])
    return out


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def _spans(tok, labels) -> list[str]:
    spans, current = [], []
    for t in [*labels, IGNORE]:
        if t == IGNORE and current:
            spans.append(tok.decode(current))
            current = []
        elif t != IGNORE:
            current.append(t)
    return spans


@pytest.mark.parametrize("system", [None, SYSTEM])
def test_deepseek_v2_ids_and_labels_are_the_official_template(tokenizer_dirs, tmp_path, system):
    plain = [{"role": m["role"], "content": m["content"].split("\n\n")[-1]} for m in TURNS]  # V2 has no thoughts
    messages = ([{"role": "system", "content": system}] if system else []) + plain
    row, tok = sft_row(tokenizer_dirs["deepseek"], tmp_path, "deepseek", messages)
    ids = official_render(tok, messages)
    labels = [IGNORE] * len(ids)
    for k, m in enumerate(messages):
        if m["role"] == "assistant":  # each reply from the end of its inference prompt through its EOS
            start, end = (
                len(official_render(tok, messages[:k], gen=True)),
                len(official_render(tok, messages[: k + 1])),
            )
            labels[start:end] = ids[start:end]
    assert row["input_ids"] == ids and row["labels"] == labels
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1  # the template's BOS, not a second one
    assert _spans(tok, row["labels"]) == [f" {ANSWER}{EOS}", f" 6{EOS}"]  # the space after 'Assistant:' is trained
    first = next(i for i, t in enumerate(labels) if t != IGNORE)
    assert tok.decode(ids[:first]) == (
        "<｜begin▁of▁sentence｜>" + (f"{SYSTEM}\n\n" if system else "") + "User: What is 2 plus 2?\n\nAssistant:"
    )


def test_deepseek_v2_inference_prompt_is_the_official_generation_prompt(tokenizer_dirs):
    tok = AutoTokenizer.from_pretrained(tokenizer_dirs["deepseek"])
    tpl = get_template("deepseek", tok)
    history = [{"role": m["role"], "content": m["content"].split("\n\n")[-1]} for m in TURNS[:3]]
    ours = tpl.render_prompt(history, system=SYSTEM)
    assert _ids(tok, ours) == official_render(tok, [{"role": "system", "content": SYSTEM}, *history], gen=True)
    assert ours.endswith("User: And 3 plus 3?\n\nAssistant:")


def test_deepseekr1_trains_the_thought_after_the_official_generation_prompt(tokenizer_dirs, tmp_path):
    row, tok = sft_row(tokenizer_dirs["deepseekr1"], tmp_path, "deepseekr1", TURNS[:2])
    prompt = official_render(tok, TURNS[:1], gen=True)
    assert tok.decode(prompt).endswith("<｜User｜>What is 2 plus 2?<｜Assistant｜><think>\n")
    reply = _ids(tok, f"{THOUGHT}\n</think>\n\n{ANSWER}{EOS}")
    assert row["input_ids"] == prompt + reply
    assert row["labels"] == [IGNORE] * len(prompt) + reply
    # inference renders the same prompt (chat, api, predict)
    tpl = get_template("deepseekr1", tok)
    assert _ids(tok, tpl.render_prompt(TURNS[:1])) == prompt


def test_deepseekr1_history_is_rendered_as_the_official_template_with_mask_history(tokenizer_dirs, tmp_path):
    row, tok = sft_row(tokenizer_dirs["deepseekr1"], tmp_path, "deepseekr1", TURNS, mask_history=True)
    # the official history: the earlier reply without its thought (what a client sends back), then the prompt
    history = [TURNS[0], {"role": "assistant", "content": ANSWER}, TURNS[2]]
    prompt = official_render(tok, history, gen=True)
    reply = _ids(tok, f"Three twice.\n</think>\n\n6{EOS}")
    assert row["input_ids"] == prompt + reply
    assert row["labels"] == [IGNORE] * len(prompt) + reply
    assert _ids(tok, get_template("deepseekr1", tok).render_prompt(history)) == prompt


def test_deepseekr1_without_thinking_prompts_the_empty_thought(tokenizer_dirs, tmp_path):
    """enable_thinking: false (LLaMA-Factory's semantics): thoughts removed, the empty block is prompt, untrained."""
    row, tok = sft_row(tokenizer_dirs["deepseekr1"], tmp_path, "deepseekr1", TURNS[:2], enable_thinking=False)
    text = tok.apply_chat_template(TURNS[:1], add_generation_prompt=True, tokenize=False)
    prompt = _ids(tok, text + "\n</think>\n\n")  # the official prompt's '<think>\n' closed at once
    reply = _ids(tok, f"{ANSWER}{EOS}")
    assert row["input_ids"] == prompt + reply
    assert row["labels"] == [IGNORE] * len(prompt) + reply
    # every earlier reply too: the default (all replies trained) renders each one's empty block as prompt
    both, _ = sft_row(tokenizer_dirs["deepseekr1"], tmp_path / "b", "deepseekr1", TURNS, enable_thinking=False)
    assert _spans(tok, both["labels"]) == [f"{ANSWER}{EOS}", f"6{EOS}"]
    assert tok.decode(both["input_ids"]).count("<think>\n\n</think>\n\n") == 2
