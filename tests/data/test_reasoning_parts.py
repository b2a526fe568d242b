"""Reasoning text is never dropped: a reply's separated reasoning (a ``reasoning`` part, ``reasoning_content``) is
carried to the template as it is, and the reply's text stays whole whatever ``<think>`` / ``</think>`` it quotes.

Every record here is tokenized by the real pipeline (tiny Qwen tokenizer, template qwen3) and compared with the
official Qwen3 chat template's ``apply_chat_template`` on the same messages in their OpenAI form
(``reasoning_content`` + ``content``): the official template never splits ``content`` when ``reasoning_content``
is given, so every character of the text is rendered. sft trains every reply with its thought, i.e. TRL's
prefix-preserving training variant of the same template; mask_history, dpo and kto train the last reply after the
official history. The records have the shapes of LLaMA-Factory's ``reason_tool_use_demo_50.jsonl`` (v1 parts) and
of OpenAI reasoning data.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import CHAT_TEMPLATES, write_dataset
from tunekit.config import load_config
from tunekit.data.pipeline import prepare_datasets

IGNORE = -100
FIXTURES = CHAT_TEMPLATES
OPEN = "<|im_start|>assistant\n"
CLOSE = "<|im_end|>"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a term up.",
            "parameters": {"type": "object", "properties": {"term": {"type": "string"}}, "required": ["term"]},
        },
    }
]

#: texts that quote the tags somewhere other than a leading thought block
TUTORIAL = (
    "A reasoning model writes its thought between <think> and </think>, then the answer. For example:\n\n"
    "<think>\nAdd the numbers.\n</think>\n\n4\n\nEverything before the last </think> is the thought."
)
ENDS_WITH_TAG = "The closing tag of a thought is </think>"
ECHO = 'The tool said: "<think>cached</think> lookup done". So the term means a closing tag.'


def parts(role, *items):
    return {"role": role, "content": [{"type": kind, "value": value} for kind, value in items]}


def oa(role, content, reasoning=None, calls=None):
    """An OpenAI-form message (what the official template reads)."""
    msg = {"role": role, "content": content}
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    if calls:
        msg["tool_calls"] = [{"type": "function", "function": c} for c in calls]
    return msg


LOOKUP = {"name": "lookup", "arguments": {"term": "</think>"}}

#: (record as tunekit reads it, the same conversation in OpenAI form for the official template)
SINGLE = [
    (
        {
            "messages": [
                parts("user", ("text", "How do thinking tags work?")),
                parts("assistant", ("reasoning", "Explain with an example."), ("text", TUTORIAL)),
            ]
        },
        [oa("user", "How do thinking tags work?"), oa("assistant", TUTORIAL, "Explain with an example.")],
    ),
    (
        {
            "messages": [
                {"role": "user", "content": "Name the closing tag."},
                {"role": "assistant", "content": ENDS_WITH_TAG, "reasoning_content": "It is </think>."},
            ]
        },
        [oa("user", "Name the closing tag."), oa("assistant", ENDS_WITH_TAG, "It is </think>.")],
    ),
]
MULTI = [
    (
        {
            "messages": [
                parts("system", ("text", "Use tools.")),
                parts("user", ("text", "What does </think> mean?")),
                parts("assistant", ("reasoning", "Look it up."), ("tool_call", json.dumps(LOOKUP))),
                parts("tool", ("text", '{"result": "<think>cached</think> lookup done"}')),
                parts("assistant", ("reasoning", "The tool echoed </think>."), ("text", ECHO)),
                parts("user", ("text", "And <think>?")),
                parts("assistant", ("reasoning", "Opening tag."), ("text", TUTORIAL)),
            ],
            "tools": json.dumps(TOOLS),
        },
        [
            oa("system", "Use tools."),
            oa("user", "What does </think> mean?"),
            oa("assistant", "", "Look it up.", [LOOKUP]),
            oa("tool", '{"result": "<think>cached</think> lookup done"}'),
            oa("assistant", ECHO, "The tool echoed </think>."),
            oa("user", "And <think>?"),
            oa("assistant", TUTORIAL, "Opening tag."),
        ],
    ),
]


def official(name: str) -> str:
    return (FIXTURES / f"{name}.jinja").read_text(encoding="utf-8")


def _prepare(model, tmp_path, records, stage="sft", entry=None, **opts):
    from tunekit.model.loader import load_tokenizer

    folder = tmp_path / "data"
    path = write_dataset(folder, "reason", records, entry, suffix=".jsonl")
    dataset = "reason" if entry else str(path)  # a file given by path: its format is guessed, as LLaMA-Factory v1 does
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(model),
            "dataset": dataset,
            "dataset_dir": str(folder),
            "output_dir": str(tmp_path / "out"),
            "cutoff_len": 4096,
            "stage": stage,
            "template": "qwen3",
            **opts,
        },
    )
    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok, stage), tok


def _official_ids(tok, messages, jinja: str, tools=None) -> tuple[list[int], str]:
    """``apply_chat_template`` ids of the conversation (its final newline, opening the next turn, not trained)."""
    text = tok.apply_chat_template(messages, chat_template=jinja, tools=tools, tokenize=False)
    assert text.endswith(CLOSE + "\n")
    text = text[:-1]
    ids = tok.apply_chat_template(messages, chat_template=jinja, tools=tools, tokenize=True, return_dict=True)[
        "input_ids"
    ]
    assert ids[-1] == tok.convert_tokens_to_ids("\n") or tok.decode(ids[-1:]) == "\n"
    return ids[:-1], text


def _replies(text: str) -> list[str]:
    """Each assistant reply of an official rendering: after its header, up to and including its end marker."""
    out, at = [], 0
    while (start := text.find(OPEN, at)) >= 0:
        end = text.index(CLOSE, start) + len(CLOSE)
        out.append(text[start + len(OPEN) : end])
        at = end
    return out


def _trained_runs(tok, ids, labels) -> list[str]:
    runs, run = [], []
    for i, lab in zip(ids, labels):
        if lab != IGNORE:
            assert lab == i
            run.append(i)
        elif run:
            runs.append(tok.decode(run))
            run = []
    if run:
        runs.append(tok.decode(run))
    return runs


def _check_report(data, n):
    (report,) = data.reports
    assert (report.records, report.invalid, report.dropped, report.kept) == (n, 0, 0, n), report


def _oa_tools(record):
    return json.loads(record["tools"]) if "tools" in record else None


@pytest.mark.parametrize("mask_history", [False, True])
def test_sft_keeps_every_character_of_the_reply(tiny_qwen, tmp_path, mask_history):
    records = [r for r, _ in SINGLE + MULTI]
    data, tok = _prepare(tiny_qwen, tmp_path, records, mask_history=mask_history)
    _check_report(data, len(records))
    for row, (record, messages) in zip(data.train, SINGLE + MULTI):
        # sft trains every reply with its thought (TRL's training template); mask_history: the official history
        jinja = official("qwen3" if mask_history else "qwen3_training_trl")
        ids, text = _official_ids(tok, messages, jinja, _oa_tools(record))
        assert row["input_ids"] == ids
        replies = _replies(text)
        assert _trained_runs(tok, row["input_ids"], row["labels"]) == (replies[-1:] if mask_history else replies)
        last = messages[-1]
        assert replies[-1] == "<think>\n" + last["reasoning_content"] + "\n</think>\n\n" + last["content"] + CLOSE


def test_kto_keeps_every_character_of_the_reply(tiny_qwen, tmp_path):
    records = [{**r, "label": k % 2 == 0} for k, (r, _) in enumerate(SINGLE + MULTI)]
    data, tok = _prepare(
        tiny_qwen,
        tmp_path,
        records,
        stage="kto",
        entry={"formatting": "openai", "columns": {"messages": "messages", "tools": "tools", "kto_tag": "label"}},
    )
    _check_report(data, len(records))
    for row, (record, messages) in zip(data.train, SINGLE + MULTI):
        ids, text = _official_ids(tok, messages, official("qwen3"), _oa_tools(record))
        assert row["input_ids"] == ids
        assert _trained_runs(tok, row["input_ids"], row["labels"]) == _replies(text)[-1:]
        assert tok.decode(row["response_ids"]) == _replies(text)[-1]


def _pair(record, chosen, rejected):
    """A v1 pair (chosen_messages / rejected_messages) whose last replies are ``chosen`` / ``rejected``."""
    history = record["messages"][:-1]
    return {
        "chosen_messages": history + [chosen],
        "rejected_messages": history + [rejected],
        **({"tools": record["tools"]} if "tools" in record else {}),
    }


def test_dpo_keeps_every_character_of_both_replies(tiny_qwen, tmp_path):
    # chosen and rejected differ only between two </think> of their text: joined and split again, they were the
    # same answer and the pair was dropped as identical
    other = TUTORIAL.replace("Add the numbers.", "Subtract the numbers.")
    records, expected = [], []
    for record, messages in SINGLE + MULTI:
        chosen = parts("assistant", ("reasoning", "Explain."), ("text", TUTORIAL))
        rejected = parts("assistant", ("reasoning", "Explain."), ("text", other))
        records.append(_pair(record, chosen, rejected))
        expected.append(
            (
                messages[:-1],
                [oa("assistant", TUTORIAL, "Explain."), oa("assistant", other, "Explain.")],
                _oa_tools(record),
            )
        )
    data, tok = _prepare(tiny_qwen, tmp_path, records, stage="dpo")
    _check_report(data, len(records))
    for row, (history, (chosen, rejected), tools) in zip(data.train, expected):
        for side, reply in (("chosen", chosen), ("rejected", rejected)):
            ids, text = _official_ids(tok, history + [reply], official("qwen3"), tools)
            assert row[f"{side}_input_ids"] == ids, side
            assert _trained_runs(tok, ids, row[f"{side}_labels"]) == _replies(text)[-1:]
            assert reply["content"] + CLOSE in _replies(text)[-1]


def test_canonical_reply_keeps_reasoning_apart_from_its_text():
    from tunekit.data.dataset_info import ALPACA_COLUMNS, SHAREGPT_TAGS, DatasetAttr
    from tunekit.data.formats import convert_record
    from tunekit.data.readers import RawRecord

    attr = DatasetAttr(
        name="x.jsonl",
        load_from="file",
        path="x.jsonl",
        formatting="auto",
        columns=dict(ALPACA_COLUMNS),
        tags=dict(SHAREGPT_TAGS),
    )
    (record, _), (openai, _) = SINGLE
    sample = convert_record(RawRecord(record, "x.jsonl", 0), attr, "sft")
    assert sample["messages"][1] == {"role": "assistant", "content": TUTORIAL, "reasoning": "Explain with an example."}
    sample = convert_record(RawRecord(openai, "x.jsonl", 1), attr, "sft")
    assert sample["messages"][1] == {"role": "assistant", "content": ENDS_WITH_TAG, "reasoning": "It is </think>."}
    # a plain-text reply is left to the template, which parses it as the official template does
    plain = {
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>\nr\n</think>\n\na"}]
    }
    assert convert_record(RawRecord(plain, "x.jsonl", 2), attr, "sft")["messages"][1] == {
        "role": "assistant",
        "content": "<think>\nr\n</think>\n\na",
    }


def _canonical(record) -> dict:
    from tunekit.data.dataset_info import ALPACA_COLUMNS, SHAREGPT_TAGS, DatasetAttr
    from tunekit.data.formats import convert_record
    from tunekit.data.readers import RawRecord

    attr = DatasetAttr(
        name="x.jsonl",
        load_from="file",
        path="x.jsonl",
        formatting="auto",
        columns=dict(ALPACA_COLUMNS),
        tags=dict(SHAREGPT_TAGS),
    )
    return convert_record(RawRecord(record, "x.jsonl", 0), attr, "sft")


def test_plain_text_replies_render_as_the_official_template_parses_them():
    """No reasoning in the data: the text is the official template's to parse (its split at </think>), exactly."""
    from tunekit.data.templates import get_template

    render_jinja_template = pytest.importorskip("transformers.utils.chat_template_utils").render_jinja_template
    messages = [
        {"role": "user", "content": "Tags?"},
        {"role": "assistant", "content": "<think>\nr\n</think>\n\n" + TUTORIAL},
        {"role": "user", "content": "Again?"},
        {"role": "assistant", "content": ENDS_WITH_TAG},
    ]
    sample = _canonical({"messages": messages})
    assert sample["messages"] == messages  # left as written
    ours = get_template("qwen3").render(sample["messages"], strip_history_thoughts=True)
    theirs = render_jinja_template([messages], chat_template=official("qwen3"))[0][0]
    assert ours + "\n" == theirs


def test_a_template_without_thinking_block_writes_the_reasoning_in_front_whole():
    """qwen (no thinking block): reasoning as a <think> block before the reply, tool calls formatted, nothing cut."""
    from tunekit.data.templates import get_template

    record = {
        "messages": [
            parts("user", ("text", "What does </think> mean?")),
            parts("assistant", ("reasoning", "It is </think>, look it up."), ("tool_call", json.dumps(LOOKUP))),
            parts("tool", ("text", "a closing tag")),
            parts("assistant", ("reasoning", "Explain."), ("text", TUTORIAL)),
        ],
        "tools": json.dumps(TOOLS),
    }
    sample = _canonical(record)
    turns = get_template("qwen").encode_turns(sample["messages"], "S", sample["tools"])
    assert [r for _, r in turns] == [
        "<think>\nIt is </think>, look it up.\n</think>\n\n<tool_call>\n"
        '{"name": "lookup", "arguments": {"term": "</think>"}}'
        "\n</tool_call><|im_end|>",
        "<think>\nExplain.\n</think>\n\n" + TUTORIAL + "<|im_end|>",
    ]


def test_jinja_mode_passes_reasoning_to_a_template_that_reads_it_else_writes_it_in_front(tiny_qwen):
    from transformers import AutoTokenizer

    from tunekit.data.templates import get_template

    (record, _), _ = SINGLE
    messages = _canonical(record)["messages"]
    tok = AutoTokenizer.from_pretrained(str(tiny_qwen))
    tok.chat_template = official("qwen3")  # reads reasoning_content: the same turns as the named qwen3 template
    turns = get_template("jinja", tok).encode_turns(messages)
    assert turns == get_template("qwen3", tok).encode_turns(messages)
    assert turns[0][1] == "<think>\nExplain with an example.\n</think>\n\n" + TUTORIAL + "<|im_end|>"
    tok.chat_template = official(
        "qwen"
    )  # does not: the thought goes in front of the text, as the named qwen writes it
    ((prompt, reply),) = get_template("jinja", tok).encode_turns(messages)
    assert reply == "<think>\nExplain with an example.\n</think>\n\n" + TUTORIAL + "<|im_end|>"
    assert (prompt, reply) == get_template("qwen", tok).encode_turns(messages)[0]


def test_an_empty_separated_thought_never_cuts_the_text():
    """reasoning_content "" (present, empty): the official template then never parses the text, nor does tunekit."""
    from tunekit.data.templates import get_template

    lookup = json.dumps(LOOKUP)
    record = {
        "messages": [
            {"role": "user", "content": "Tags?"},
            {"role": "assistant", "content": "", "reasoning_content": "", "tool_calls": [{"function": LOOKUP}]},
            {"role": "tool", "content": "ok"},
            {"role": "assistant", "content": "<think>\nquoted\n</think>\n\nkept", "reasoning_content": ""},
        ]
    }
    messages = _canonical(record)["messages"]
    assert messages[1] == {"role": "function_call", "content": lookup, "reasoning": ""}
    for name in ("qwen", "qwen3"):
        replies = [r for _, r in get_template(name).encode_turns(messages, tools=json.dumps(TOOLS))]
        thought = "<think>\n\n</think>\n\n" if name == "qwen3" else ""
        assert replies == [
            f"{thought}<tool_call>\n{lookup}\n</tool_call><|im_end|>",
            f"{thought}<think>\nquoted\n</think>\n\nkept<|im_end|>",
        ], name
