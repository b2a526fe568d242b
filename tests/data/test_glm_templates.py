"""The GLM templates at the token level.

``glm4``: on the tiny GLM-4 (``tunekit tiny-model --like glm4``, saved with GLM-4's official chat template), tunekit's
SFT ids are exactly what ``apply_chat_template`` gives, every prompt is the inference prompt
(``add_generation_prompt=True``) token for token, and the trained tokens are each reply with the ``<|user|>`` that
ends it (GLM has no end-of-turn token; THUDM's GLM-4 fine-tuning demo trains that one).

``chatglm3``: its tokenizer is remote code (``tokenization_chatglm.py`` + a SentencePiece model) that cannot be loaded
offline, so what is pinned is the rendering against the format ChatGLM3's repository documents (PROMPT_en.md in
THUDM/ChatGLM3): ``<|role|>{metadata}\\n`` then the message, ``[gMASK]sop`` first (its ``get_prefix_tokens``).
"""

from __future__ import annotations

import pytest

from tests.helpers import official_render, sft_row
from tunekit.data.templates import get_template
from tunekit.tiny.text import build_tiny_model

IGNORE = -100
SYSTEM = "You are a helpful assistant."
SINGLE = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "What is 2 plus 2?"},
    {"role": "assistant", "content": "It is 4."},
]
MULTI = [
    *SINGLE,
    {"role": "user", "content": "And 3 plus 3?"},
    {"role": "assistant", "content": "6"},
]


@pytest.fixture(scope="module")
def glm4(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("glm4") / "model", like="glm4", seed=0)


def _expected(tok, messages) -> tuple[list[int], list[int]]:
    """The official ids + the trained <|user|>, and the labels: each reply from the end of its inference prompt
    through the <|user|> after it."""
    user = tok.convert_tokens_to_ids("<|user|>")
    ids = official_render(tok, messages) + [user]
    labels = [IGNORE] * len(ids)
    for k, m in enumerate(messages):
        if m["role"] == "assistant":
            start, end = (
                len(official_render(tok, messages[:k], gen=True)),
                len(official_render(tok, messages[: k + 1])) + 1,
            )
            assert ids[:start] == official_render(tok, messages[:k], gen=True) and ids[end - 1] == user
            labels[start:end] = ids[start:end]
    return ids, labels


def test_glm4_single_turn_ids_and_labels_are_the_official_template(glm4, tmp_path):
    row, tok = sft_row(glm4, tmp_path, "glm4", SINGLE)
    ids, labels = _expected(tok, SINGLE)
    assert row["input_ids"] == ids and row["labels"] == labels
    # [gMASK] <sop> <|system|> ... <|user|> ... <|assistant|> | \n It is 4. <|user|>
    assert ids[:3] == [2, 4, 6] and ids.count(7) == 2 and ids.count(8) == 1
    trained = [t for t in row["labels"] if t != IGNORE]
    assert tok.decode(trained) == "\nIt is 4.<|user|>"
    assert tok.decode(row["input_ids"][: row["labels"].index(trained[0])]) == (
        f"[gMASK]<sop><|system|>\n{SYSTEM}<|user|>\nWhat is 2 plus 2?<|assistant|>"
    )


def test_glm4_multi_turn_ids_and_labels_are_the_official_template(glm4, tmp_path):
    row, tok = sft_row(glm4, tmp_path, "glm4", MULTI)
    ids, labels = _expected(tok, MULTI)
    assert row["input_ids"] == ids and row["labels"] == labels
    spans, current = [], []
    for t in row["labels"] + [IGNORE]:
        if t == IGNORE and current:
            spans.append(tok.decode(current))
            current = []
        elif t != IGNORE:
            current.append(t)
    assert spans == ["\nIt is 4.<|user|>", "\n6<|user|>"]  # the user turn's own text is not trained


def test_glm4_inference_prompt_is_what_training_saw(glm4, tmp_path):
    """tunekit's own rendering at inference (chat, API, predict) gives the tokenizer's apply_chat_template ids."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(glm4)
    tpl = get_template("glm4", tok)
    ours = tpl.render_prompt(MULTI[1:4], system=SYSTEM)
    assert tok(ours, add_special_tokens=False)["input_ids"] == official_render(tok, MULTI[:4], gen=True)


def _documented(turns: list[tuple[str, str, str]]) -> str:
    """ChatGLM3's documented format: ``<|role|>{metadata}`` on a header line, the message after it, no newline
    before the next role token (the doc's extra line breaks are for reading only), after ``[gMASK]sop``. The message
    is encoded on its own by the SentencePiece tokenizer, whose dummy prefix is the space after the header line."""
    return "[gMASK]sop" + "".join(f"<|{role}|>{meta}\n {text}" for role, meta, text in turns)


def test_chatglm3_renders_the_documented_multi_turn_format():
    system = (
        "You are ChatGLM3, a large language model trained by Zhipu.AI. Follow the user's instructions carefully. "
        "Respond using markdown."
    )
    reply = "Hello, I'm ChatGLM3. What can I assist you today?"
    conv = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": reply}]
    tpl = get_template("chatglm3")
    turns = tpl.encode_turns(conv, system=system)
    documented = _documented([("system", "", system), ("user", "", "Hello"), ("assistant", "", reply)])
    assert turns[0][0] + turns[0][1] == documented + "</s>"  # the last reply ends with eos, as its finetune demo
    assert (
        tpl.render_prompt(conv[:1], system=system)
        == _documented([("system", "", system), ("user", "", "Hello")]) + "<|assistant|>"
    )
    two = conv + [{"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye!"}]
    full = "".join(p + r for p, r in tpl.encode_turns(two))
    assert (
        full
        == _documented(
            [("user", "", "Hello"), ("assistant", "", reply), ("user", "", "Bye"), ("assistant", "", "Bye!")]
        )
        + "</s>"
    )
