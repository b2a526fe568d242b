"""Typed content parts: OpenAI text parts, LLaMA-Factory v1 text / reasoning / tool_call parts and
chosen_messages / rejected_messages pairs; exact ids and labels per part kind, and every bad part named.

The records are written here in the shapes of LLaMA-Factory's data/v1_sft_demo.jsonl, v1_dpo_demo.jsonl and
reason_tool_use_demo_50.jsonl (role/content messages, content a list of {"type", "value"} parts, a per-message
loss_weight, tools as a JSON string).
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import CHAT_TEMPLATES, prepare_jsonl, write_dataset
from tunekit.data.dataset_info import ALPACA_COLUMNS, SHAREGPT_TAGS, DatasetAttr, resolve_datasets
from tunekit.data.formats import RecordError, convert_record
from tunekit.data.readers import RawRecord, read_records

IGNORE = -100
TOOLS = json.dumps(
    [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add two numbers.",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                    "required": ["a", "b"],
                },
            },
        }
    ]
)


def v1(role, *parts, weight=None):
    msg = {"role": role, "content": [{"type": kind, "value": value} for kind, value in parts]}
    if weight is not None:
        msg["loss_weight"] = weight
    return msg


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


def _data(model, tmp_path, records, stage="sft", name="v1", **opts):
    """Tokenize ``records`` (a jsonl file given by path, as LLaMA-Factory v1 datasets are) with the pipeline."""
    return prepare_jsonl(model, tmp_path, records, stage, name=name, **opts)


def _expected(tok, pieces):
    """ids and labels of literal (text, trained) pieces, each tokenized on its own."""
    ids, labels = [], []
    for text, trained in pieces:
        piece = tok(text, add_special_tokens=False)["input_ids"]
        ids += piece
        labels += piece if trained else [IGNORE] * len(piece)
    return ids, labels


def _convert(records, stage="sft", file="x.jsonl"):
    """Records of a file given by path (formatting guessed), as LLaMA-Factory v1 datasets are used."""
    attr = DatasetAttr(
        name=file,
        load_from="file",
        path=file,
        formatting="auto",
        columns=dict(ALPACA_COLUMNS),
        tags=dict(SHAREGPT_TAGS),
    )
    return [convert_record(RawRecord(r, file, i), attr, stage) for i, r in enumerate(records)]


def _error(record, stage="sft") -> str:
    with pytest.raises(RecordError) as exc:
        _convert([record], stage)
    return str(exc.value)


# --- text parts ----------------------------------------------------------------------------------------------


def test_text_parts_of_both_shapes_tokenize_like_plain_strings(tiny_qwen, tmp_path):
    plain = {
        "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "What is 2 plus 2?"},
            {"role": "assistant", "content": "It is 4."},
        ]
    }
    openai = {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
            {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2 plus 2?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "It is 4."}]},
        ]
    }
    lf_v1 = {
        "messages": [
            v1("system", ("text", "Be terse."), weight=0.0),
            v1("user", ("text", "What is 2 plus 2?"), weight=0.0),
            v1("assistant", ("text", "It is 4."), weight=1.0),
        ]
    }
    data, tok = _data(tiny_qwen, tmp_path, [plain, openai, lf_v1], template="qwen")
    rows = data.train
    ids, labels = _expected(
        tok,
        [
            (
                "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nWhat is 2 plus 2?<|im_end|>\n"
                "<|im_start|>assistant\n",
                False,
            ),
            ("It is 4.<|im_end|>", True),
        ],
    )
    for row in rows:
        assert row["input_ids"] == ids and row["labels"] == labels
    # the exact ids of the tiny Qwen tokenizer: <|im_start|>=1, <|im_end|>=2; the reply "It is 4.<|im_end|>" is trained
    assert (
        ids[:2] == [1, 1745]
        and labels[-6:] == [799, 315, 225, 24, 18, 2]
        and labels.count(IGNORE) == len(ids) - 6 == 28
    )


def test_reasoning_part_is_the_qwen3_thinking_block(tiny_qwen, tmp_path):
    record = {
        "messages": [
            v1("user", ("text", "What is 2 plus 2?")),
            v1("assistant", ("reasoning", "Two and two make four."), ("text", "4")),
        ]
    }
    data, tok = _data(tiny_qwen, tmp_path, [record], template="qwen3")
    ids, labels = _expected(
        tok,
        [
            ("<|im_start|>user\nWhat is 2 plus 2?<|im_end|>\n<|im_start|>assistant\n", False),
            ("<think>\nTwo and two make four.\n</think>\n\n4<|im_end|>", True),
        ],
    )
    row = data.train[0]
    assert row["input_ids"] == ids and row["labels"] == labels
    # the same record with the thought written inline (LLaMA-Factory v0 reasoning data) gives the same ids
    inline = {
        "messages": [
            {"role": "user", "content": "What is 2 plus 2?"},
            {"role": "assistant", "content": "<think>\nTwo and two make four.\n</think>\n\n4"},
        ]
    }
    same, _ = _data(tiny_qwen, tmp_path, [inline], name="inline", template="qwen3")
    assert same.train[0]["input_ids"] == ids and same.train[0]["labels"] == labels


def test_reasoning_with_a_template_without_thinking_block_stays_in_the_reply(tiny_qwen, tmp_path):
    record = {
        "messages": [v1("user", ("text", "Hi")), v1("assistant", ("reasoning", "Greet back."), ("text", "Hello"))]
    }
    data, tok = _data(tiny_qwen, tmp_path, [record], template="qwen")
    ids, labels = _expected(
        tok,
        [
            (
                "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
                False,
            ),
            ("<think>\nGreet back.\n</think>\n\nHello<|im_end|>", True),
        ],
    )
    assert data.train[0]["input_ids"] == ids and data.train[0]["labels"] == labels


# --- tool calls ---------------------------------------------------------------------------------------------


def _tool_record():
    return {
        "messages": [
            v1("system", ("text", "Use tools.")),
            v1("user", ("text", "Add 1 and 2, and 3 and 4.")),
            v1(
                "assistant",
                ("reasoning", "Two calls."),
                ("tool_call", call("add", a=1, b=2)),
                ("tool_call", call("add", a=3, b=4)),
            ),
            v1("tool", ("text", "[3, 7]")),
            v1("assistant", ("text", "3 and 7.")),
        ],
        "tools": TOOLS,
    }


def test_tool_call_parts_render_in_the_templates_tool_format(tiny_qwen, tmp_path):
    data, tok = _data(tiny_qwen, tmp_path, [_tool_record()], template="qwen3")
    from tunekit.data.templates import get_template

    system = get_template("qwen3")._system_text("Use tools.", TOOLS)  # the Hermes tool prompt, as in glaive data
    ids, labels = _expected(
        tok,
        [
            (
                f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\nAdd 1 and 2, and 3 and 4.<|im_end|>\n"
                "<|im_start|>assistant\n",
                False,
            ),
            (
                '<think>\nTwo calls.\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n'
                "</tool_call>\n"
                '<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 4}}\n</tool_call><|im_end|>',
                True,
            ),
            (
                "\n<|im_start|>user\n<tool_response>\n[3, 7]\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
                False,
            ),
            ("<think>\n\n</think>\n\n3 and 7.<|im_end|>", True),
        ],
    )
    row = data.train[0]
    assert row["input_ids"] == ids and row["labels"] == labels
    # the canonical sample: one function_call message holding both calls, its thought kept apart (never joined)
    (sample,) = _convert([_tool_record()])
    assert sample["messages"][1] == {
        "role": "function_call",
        "reasoning": "Two calls.",
        "content": '[{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "add", "arguments": {"a": 3, "b": 4}}]',
    }
    assert sample["messages"][2] == {"role": "observation", "content": "[3, 7]"} and sample["system"] == "Use tools."


def test_tool_call_part_under_llama3(tiny_llama, tmp_path):
    record = {
        "messages": [v1("user", ("text", "Add 1 and 2.")), v1("assistant", ("tool_call", call("add", a=1, b=2)))],
        "tools": TOOLS,
    }
    data, tok = _data(tiny_llama, tmp_path, [record], template="llama3")
    row = data.train[0]
    reply = tok('{"name": "add", "parameters": {"a": 1, "b": 2}}<|eot_id|>', add_special_tokens=False)["input_ids"]
    assert row["input_ids"][-len(reply) :] == reply and row["labels"][-len(reply) :] == reply
    assert row["labels"].count(IGNORE) == len(row["input_ids"]) - len(reply)


def test_openai_tool_calls_field_equals_tool_call_parts():
    parts = {"messages": [v1("user", ("text", "Add 1 and 2.")), v1("assistant", ("tool_call", call("add", a=1, b=2)))]}
    openai = {
        "messages": [
            {"role": "user", "content": "Add 1 and 2."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
                ],
            },
        ]
    }
    a, b = _convert([parts, openai])
    assert a["messages"] == [
        {"role": "user", "content": "Add 1 and 2."},
        {"role": "function_call", "content": '{"name": "add", "arguments": {"a": 1, "b": 2}}'},
    ]
    assert b["messages"][1] == {
        "role": "function_call",
        "content": '{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}',
    }
    from tunekit.data.templates.tools import parse_calls

    assert (
        parse_calls(a["messages"][1]["content"])
        == parse_calls(b["messages"][1]["content"])
        == [("add", '{"a": 1, "b": 2}')]
    )


# --- pairs --------------------------------------------------------------------------------------------------


def test_v1_chosen_rejected_messages_equal_the_v0_pair(tiny_qwen, tmp_path):
    prompt = [v1("system", ("text", "Be brief."), weight=0.0), v1("user", ("text", "Capital of France?"), weight=0.0)]
    pair = {
        "chosen_messages": prompt + [v1("assistant", ("text", "Paris."), weight=1.0)],
        "rejected_messages": prompt + [v1("assistant", ("text", "Lyon."), weight=1.0)],
    }
    data, tok = _data(tiny_qwen, tmp_path, [pair], stage="dpo", template="qwen")
    row = data.train[0]
    head = (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nCapital of France?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    for side, reply in (("chosen", "Paris.<|im_end|>"), ("rejected", "Lyon.<|im_end|>")):
        ids, labels = _expected(tok, [(head, False), (reply, True)])
        assert row[f"{side}_input_ids"] == ids and row[f"{side}_labels"] == labels
    v0 = {
        "conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Capital of France?"}],
        "chosen": {"from": "gpt", "value": "Paris."},
        "rejected": {"from": "gpt", "value": "Lyon."},
    }
    folder = tmp_path / "v0"
    write_dataset(
        folder,
        "v0",
        [v0],
        {
            "formatting": "sharegpt",
            "ranking": True,
            "columns": {"messages": "conversations", "chosen": "chosen", "rejected": "rejected"},
        },
    )
    (attr,) = resolve_datasets(["v0"], folder)
    (v0_sample,) = [convert_record(r, attr, "dpo") for r in read_records(attr)]
    (v1_sample,) = _convert([pair], "dpo")
    assert {k: v for k, v in v1_sample.items() if k != "_source"} == {
        k: v for k, v in v0_sample.items() if k != "_source"
    }


def test_v1_pairs_must_share_the_prompt():
    pair = {
        "chosen_messages": [v1("user", ("text", "a")), v1("assistant", ("text", "b"))],
        "rejected_messages": [v1("user", ("text", "A")), v1("assistant", ("text", "c"))],
    }
    assert _error(pair, "dpo") == (
        "x.jsonl, record 0: chosen_messages and rejected_messages must share the conversation "
        "before the last reply; they differ at message 0."
    )
    open_end = {"chosen_messages": [v1("user", ("text", "a"))], "rejected_messages": [v1("user", ("text", "a"))]}
    assert _error(open_end, "dpo") == (
        "x.jsonl, record 0: 'chosen_messages' must end with the assistant's reply, found a user message."
    )


# --- bad parts: named, never an empty string ----------------------------------------------------------------


def test_unknown_part_type_is_named():
    record = {"messages": [v1("user", ("text", "a")), v1("assistant", ("text", "b"), ("citation", "c"))]}
    assert _error(record) == (
        "x.jsonl, record 0: message 1 content, part 1 has unknown type 'citation'; supported "
        "part types: text, reasoning, tool_call (and OpenAI's 'text' parts with a 'text' key)."
    )


def test_part_without_type_or_value_is_named():
    assert _error(
        {"messages": [{"role": "user", "content": [{"value": "a"}]}, {"role": "assistant", "content": "b"}]}
    ) == (
        "x.jsonl, record 0: message 0 content, part 0 must be an object with a 'type' (text, reasoning, tool_call), "
        "found \"{'value': 'a'}\"."
    )
    assert _error(
        {"messages": [{"role": "user", "content": [{"type": "text"}]}, {"role": "assistant", "content": "b"}]}
    ) == ("x.jsonl, record 0: message 0 content, part 0 ('text') needs a string 'value', found NoneType.")


def test_image_part_is_kept_not_dropped():
    """An image part becomes an <image> placeholder + the record's image (multimodal path:
    tests/multimodal/test_multimodal.py)."""
    record = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": "cat.png"}},
                ],
            },
            {"role": "assistant", "content": "A cat."},
        ]
    }
    (sample,) = _convert([record])
    assert (sample["messages"][0]["content"], sample["images"]) == ("What is this?<image>", ["cat.png"])


def test_reasoning_or_tool_call_outside_assistant_messages():
    record = {"messages": [v1("user", ("reasoning", "hmm")), v1("assistant", ("text", "b"))]}
    assert _error(record) == (
        "x.jsonl, record 0: message 0 content has a 'reasoning' part; reasoning and tool_call parts "
        "belong to assistant messages only."
    )


def test_bad_tool_call_parts():
    bad_json = {"messages": [v1("user", ("text", "a")), v1("assistant", ("tool_call", "{name: add}"))]}
    assert _error(bad_json) == (
        "x.jsonl, record 0: message 1 content, part 0 ('tool_call') is not valid JSON "
        "(Expecting property name enclosed in double quotes): '{name: add}'."
    )
    no_args = {"messages": [v1("user", ("text", "a")), v1("assistant", ("tool_call", '{"name": "add"}'))]}
    assert _error(no_args) == (
        "x.jsonl, record 0: message 1 content, part 0 ('tool_call') must be an object with 'name' "
        "and 'arguments', found \"{'name': 'add'}\"."
    )
    mixed = {
        "messages": [
            v1("user", ("text", "a")),
            v1("assistant", ("text", "Let me add."), ("tool_call", call("add", a=1))),
        ]
    }
    assert _error(mixed) == (
        "x.jsonl, record 0: message 1 content has both text and tool calls; tunekit renders a "
        "tool-call reply as the calls alone (and its reasoning). Move the text into its own "
        "assistant message, or drop it."
    )


def test_loss_weight_other_than_the_trained_default_is_refused():
    record = {"messages": [v1("user", ("text", "a"), weight=0.0), v1("assistant", ("text", "b"), weight=0.0)]}
    assert _error(record) == (
        "x.jsonl, record 0: message 1 (assistant) has loss_weight 0.0; tunekit trains every reply "
        "with weight 1.0 and no other message (0.0), other per-message weights are not supported "
        "(yet). Remove the key, or use mask_history: true to train only the last reply."
    )


def test_empty_text_parts_are_an_empty_turn_error_not_silence(tiny_qwen, tmp_path):
    record = {"messages": [v1("user", ("text", "a")), v1("assistant", ("text", ""))]}
    assert _error(record) == "x.jsonl, record 0: assistant turn 0 is empty; remove the record or fill in the answer."


# --- a sharegpt file registered without its formatting ---------------------------------------------------


def test_sharegpt_file_registered_without_formatting_gets_the_suggestion(tmp_path):
    write_dataset(
        tmp_path, "chat", [{"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]}]
    )
    write_dataset(
        tmp_path, "oai", [{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}]
    )
    msgs = {}
    for name in ("chat", "oai"):
        (attr,) = resolve_datasets([name], tmp_path)
        with pytest.raises(RecordError) as exc:
            [convert_record(r, attr, "sft") for r in read_records(attr)]
        msgs[name] = str(exc.value)
    assert msgs["chat"] == (
        f"{tmp_path / 'chat.json'}, record 0: the record holds 'conversations', a list of messages "
        f"(sharegpt-style data), but the dataset_info.json entry 'chat' reads it as alpaca (the default "
        f"formatting), which needs 'instruction'. Add \"formatting\": \"sharegpt\" to the entry 'chat'."
    )
    assert msgs["oai"] == (
        f"{tmp_path / 'oai.json'}, record 0: the record holds 'messages', a list of messages "
        f"(sharegpt-style data), but the dataset_info.json entry 'oai' reads it as alpaca (the default "
        f'formatting), which needs \'instruction\'. Add "formatting": "openai" (or "formatting": '
        f'"sharegpt" with "columns": {{"messages": "messages"}} and "tags": {{"role_tag": '
        f'"role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant", '
        f'"system_tag": "system"}}) to the entry \'oai\'.'
    )


def test_openai_messages_under_sharegpt_tags_get_the_tags_hint(tmp_path):
    write_dataset(
        tmp_path,
        "oai",
        [{"conversations": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}],
        {"formatting": "sharegpt"},
    )
    (attr,) = resolve_datasets(["oai"], tmp_path)
    with pytest.raises(
        RecordError,
        match=r"message 0 must be an object with 'from' and 'value'\. This message has "
        r"'role'/'content' \(OpenAI style\): add \"formatting\": \"openai\"",
    ):
        [convert_record(r, attr, "sft") for r in read_records(attr)]


def test_suggested_entries_load(tmp_path):
    """Each suggested fix, applied, loads the file."""
    conv = [{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}]
    tags = {
        "role_tag": "role",
        "content_tag": "content",
        "user_tag": "user",
        "assistant_tag": "assistant",
        "system_tag": "system",
    }
    for name, entry in (
        ("o1", {"formatting": "openai"}),
        ("o2", {"formatting": "sharegpt", "columns": {"messages": "messages"}, "tags": tags}),
    ):
        write_dataset(tmp_path, name, conv, entry)
        (attr,) = resolve_datasets([name], tmp_path)
        (sample,) = [convert_record(r, attr, "sft") for r in read_records(attr)]
        assert sample["messages"] == [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]


def test_v1_files_need_no_registration(tmp_path):
    """A v1 file given by path is recognised (formatting guessed), as LLaMA-Factory v1 reads it."""
    path = tmp_path / "v1_sft.jsonl"
    path.write_text(
        json.dumps(
            {"messages": [v1("user", ("text", "hi"), weight=0.0), v1("assistant", ("text", "Hello!"), weight=1.0)]}
        )
        + "\n",
        encoding="utf-8",
    )
    (attr,) = resolve_datasets([str(path)], tmp_path)
    (sample,) = [convert_record(r, attr, "sft") for r in read_records(attr)]
    assert sample["messages"] == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}]


def test_tool_and_reasoning_parts_match_the_official_qwen3_template():
    """tunekit's rendering of the v1 parts record == Qwen3's own chat template on the OpenAI form of it."""

    from tunekit.data.templates import get_template

    render_jinja_template = pytest.importorskip("transformers.utils.chat_template_utils").render_jinja_template
    official = (CHAT_TEMPLATES / "qwen3.jinja").read_text(encoding="utf-8")
    (sample,) = _convert([_tool_record()])
    ours = get_template("qwen3").render(sample["messages"], sample["system"], sample["tools"])
    calls = [
        {"type": "function", "function": {"name": "add", "arguments": {"a": a, "b": b}}} for a, b in ((1, 2), (3, 4))
    ]
    messages = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Add 1 and 2, and 3 and 4."},
        {"role": "assistant", "content": "", "reasoning_content": "Two calls.", "tool_calls": calls},
        {"role": "tool", "content": "[3, 7]"},
        {"role": "assistant", "content": "3 and 7."},
    ]
    theirs = render_jinja_template([messages], chat_template=official, tools=json.loads(TOOLS))[0][0]
    assert ours == theirs.rstrip("\n")  # the official template adds a newline after the last <|im_end|>
    # and that OpenAI form (reasoning_content, tool_calls) read by tunekit is the same canonical sample
    (openai,) = _convert([{"messages": messages, "tools": TOOLS}])
    assert openai["messages"] == sample["messages"] and openai["system"] == sample["system"]


def test_media_of_a_file_given_by_path_is_kept_not_ignored():
    """Kept for the multimodal path; a text-only template refuses it by name (tests/multimodal/test_multimodal.py)."""
    record = {
        "messages": [{"role": "user", "content": "<image>What is this?"}, {"role": "assistant", "content": "A cat."}],
        "images": ["cat.png"],
    }
    (sample,) = _convert([record])
    assert (sample["images"], sample["videos"], sample["audios"]) == (["cat.png"], [], [])


def test_consecutive_tool_results_say_how_to_merge_them():
    record = {
        "messages": [
            v1("user", ("text", "Add.")),
            v1("assistant", ("tool_call", call("add", a=1, b=2)), ("tool_call", call("add", a=3, b=4))),
            v1("tool", ("text", "3")),
            v1("tool", ("text", "7")),
            v1("assistant", ("text", "3 and 7.")),
        ]
    }
    assert _error(record) == (
        "x.jsonl, record 0: message 3 has role 'tool' where an assistant/function_call reply is "
        "expected; conversations must alternate user → assistant. Several tool results in a row: "
        "put them in one tool message (e.g. a JSON list of the results), as LLaMA-Factory's "
        "tool-use data does."
    )


def test_parts_as_arrow_rows_carry_both_keys():
    """Rows of a hub dataset (one Arrow struct for every part) have every key, the unused ones None."""
    record = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": None, "value": "a"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "b", "value": None}]},
        ]
    }
    (sample,) = _convert([record])
    assert sample["messages"] == [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
