"""A reasoning model's reply split into thought and answer (infer/reasoning.py), one parser per template family,
whole and streamed in every chunking (the streamed split must equal the whole one)."""

from __future__ import annotations

import pytest

from tunekit.data.templates import get_template
from tunekit.infer.reasoning import (
    ANSWER,
    THOUGHT,
    HarmonySplitter,
    PlainSplitter,
    ThinkSplitter,
    join_parts,
    reply_splitter,
    split_reply,
)

QWEN3 = "<think>\nTwo plus two.\nIt is four.\n</think>\n\nIt is 4."
GPT_OSS = (
    "<|channel|>analysis<|message|>Two plus two.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.<|return|>"
)

CASES = [
    ("qwen3", True, QWEN3, ("Two plus two.\nIt is four.", "It is 4.")),
    ("qwen3", True, "It is 4.", ("", "It is 4.")),  # no thought
    ("qwen3", True, "<think>\n\n</think>\n\nIt is 4.", ("", "It is 4.")),  # the empty block
    ("qwen3", False, "It is 4.", ("", "It is 4.")),  # enable_thinking off: the prompt closed the block
    ("qwen3", True, "<think>\nStill thinking", ("Still thinking", "")),  # cut by max_new_tokens
    ("qwen3_vl", True, QWEN3, ("Two plus two.\nIt is four.", "It is 4.")),
    # R1: the prompt ends with "<think>\n", the reply starts inside the thought
    ("deepseekr1", True, "Two plus two.\n</think>\n\nIt is 4.", ("Two plus two.", "It is 4.")),
    ("deepseekr1", True, "<think>\nTwo plus two.\n</think>\n\nIt is 4.", ("Two plus two.", "It is 4.")),
    ("deepseekr1", False, "It is 4.", ("", "It is 4.")),
    ("gpt_oss", True, GPT_OSS, ("Two plus two.", "It is 4.")),
    ("gpt_oss", False, "<|channel|>final<|message|>It is 4.<|return|>", ("", "It is 4.")),
    ("gpt_oss", True, "<|channel|>analysis<|message|>Hm<|end|><|start|>assist", ("Hm", "")),  # cut short
    ("gpt_oss", True, "Hello<|end|>", ("", "Hello")),  # no harmony header at all: its text
    ("qwen", True, QWEN3, ("", QWEN3)),  # no thought markers: all answer
    ("deepseek", True, "It is 4.", ("", "It is 4.")),
]


@pytest.mark.parametrize(("name", "thinking", "reply", "expected"), CASES)
def test_split_whole_and_streamed(name, thinking, reply, expected):
    template = get_template(name)
    assert split_reply(template, reply, thinking) == expected
    for size in (1, 2, 3, 7):  # every chunking streams the same split
        splitter = reply_splitter(template, thinking)
        parts = [p for i in range(0, len(reply), size) for p in splitter.feed(reply[i : i + size])]
        parts += splitter.close()
        assert join_parts(parts) == expected, size
        assert all(text for _, text in parts)


def test_the_thought_streams_before_the_answer():
    splitter = ThinkSplitter()
    assert splitter.feed("<thi") == []  # could be the opening tag: held
    assert splitter.feed("nk>\nTwo") == [(THOUGHT, "Two")]
    assert splitter.feed("\n") == []  # trailing newline held: dropped if the thought closes next
    assert splitter.feed("more</th") == [(THOUGHT, "\nmore")]
    assert splitter.feed("ink>\n\nIt") == [(ANSWER, "It")]
    assert splitter.close() == []


def test_families_by_template():
    assert isinstance(reply_splitter(get_template("qwen3")), ThinkSplitter)
    assert reply_splitter(get_template("deepseekr1"), True).state == "thought"
    assert reply_splitter(get_template("deepseekr1"), False).state == "start"
    assert isinstance(reply_splitter(get_template("gpt_oss")), HarmonySplitter)
    assert isinstance(reply_splitter(get_template("llama3")), PlainSplitter)
