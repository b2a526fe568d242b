"""``template: gpt_oss`` with tools, against gpt-oss's official chat template (``official_gpt_oss.jinja``) rendered by
``apply_chat_template`` on the tiny gpt-oss tokenizer: the tool declarations (the official TypeScript macros, branch by
branch), the commentary-channel line, a call (``<|call|>`` ends the trained call) and a tool's result, in ids and
labels; what the official macros cannot render is refused by name.

Both clocks are fixed to one day, as in ``test_template_gpt_oss.py``.
"""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from tests.helpers import freeze_harmony_day, write_dataset
from tunekit.data.templates import get_template
from tunekit.errors import ConfigError, DataError
from tunekit.tiny.text import build_tiny_model

IGNORE = -100
WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city, e.g. Paris."},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        },
        "required": ["city"],
    },
}
ARGS = {"city": "Paris", "unit": "celsius"}
CALL = json.dumps({"name": "get_weather", "arguments": ARGS})
RESULT = '{"temperature": 21, "sky": "clear"}'
#: user -> call (with its thought) -> the tool's result -> the final answer (with its thought), as tunekit reads it ...
TURNS = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "function_call", "content": f"<think>\nAsk the tool.\n</think>\n\n{CALL}"},
    {"role": "observation", "content": RESULT},
    {"role": "assistant", "content": "<think>\nIt is clear.\n</think>\n\nSunny, 21 °C."},
]
#: ... and as the official template reads it
HF = [
    TURNS[0],
    {
        "role": "assistant",
        "thinking": "Ask the tool.",
        "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": ARGS}}],
    },
    {"role": "tool", "content": RESULT},
    {"role": "assistant", "content": "Sunny, 21 °C.", "thinking": "It is clear."},
]
SHAREGPT = {"user": "human", "assistant": "gpt", "function_call": "function_call", "observation": "observation"}


@pytest.fixture(autouse=True)
def fixed_day(monkeypatch):
    freeze_harmony_day(monkeypatch)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    folder = build_tiny_model(tmp_path_factory.mktemp("gptoss") / "model", like="gpt-oss-20b", num_layers=1)
    return AutoTokenizer.from_pretrained(folder), folder


def _official_text(tokenizer, messages, tools, gen=False) -> str:
    wrapped = [{"type": "function", "function": t} for t in tools]
    return tokenizer.apply_chat_template(messages, tools=wrapped, add_generation_prompt=gen, tokenize=False)


def _official_ids(tokenizer, messages, tools, gen=False) -> list[int]:
    return tokenizer(_official_text(tokenizer, messages, tools, gen), add_special_tokens=False)["input_ids"]


def _tool(properties: dict, required: list | None = None, **extra) -> dict:
    params = {"type": "object", "properties": properties, **({"required": required} if required else {})}
    return {"name": "f", "description": "Do f.", "parameters": params, **extra}


#: every branch of the official render_typescript_type / render_tool_namespace macros
SCHEMAS = {
    "scalars": _tool(
        {
            "s": {"type": "string", "description": "A text.\nTwo lines."},
            "n": {"type": "number", "default": 1.5},
            "i": {"type": "integer", "default": 3},
            "b": {"type": "boolean", "default": False},
            "ns": {"type": "string", "nullable": True, "default": None},
            "any": {"description": "Anything."},
        },
        ["s", "i"],
    ),
    "enums": _tool(
        {"e": {"type": "string", "enum": ["a", "b"], "default": "a"}, "f": {"type": "string", "enum": [1]}}
    ),
    "arrays": _tool(
        {
            "s": {"type": "array", "items": {"type": "string"}},
            "n": {"type": "array", "items": {"type": "number"}, "nullable": True},
            "i": {"type": "array", "items": {"type": "integer"}},
            "b": {"type": "array", "items": {"type": "boolean"}},
            "bare": {"type": "array", "nullable": True},
            "nested": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
            "objs": {"type": "array", "items": {"type": "object", "properties": {"z": {"type": "boolean"}}}},
            "long": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"a_long_name": {"type": "string"}, "b": {"type": "number"}},
                },
            },
            "pair": {"type": "array", "items": {"type": ["object", "object"]}},
        }
    ),
    "objects": _tool(
        {
            "o": {
                "type": "object",
                "properties": {
                    "x": {"type": "string"},
                    "y": {"type": "object", "properties": {"z": {"type": "integer"}}},
                },
                "required": ["x"],
            },
            "free": {"type": "object"},
        },
        ["o"],
    ),
    "unions": _tool(
        {
            "t": {"type": ["string", "null"]},
            "one": {"type": ["integer"]},
            "v": {"oneOf": [{"type": "string", "description": "a name", "default": "x"}, {"type": "number"}]},
            "vo": {"oneOf": [{"type": "object", "properties": {"q": {"type": "string"}}}, {"type": "string"}]},
            "vd": {"oneOf": [{"type": "string"}], "default": "y"},
        }
    ),
    "no_parameters": {"name": "ping", "description": "Ping.", "parameters": {"type": "object", "properties": {}}},
    "no_parameters_key": {"name": "now", "description": ""},
    "unicode": _tool({"ville": {"type": "string", "description": "La ville, « Paris » ou 東京."}}),
}


@pytest.mark.parametrize("name", SCHEMAS)
def test_tool_declarations_are_the_official_macros(tok, name):
    tokenizer, _ = tok
    tools = [SCHEMAS[name], WEATHER]
    ours = get_template("gpt_oss", tokenizer).render_prompt(TURNS[:1], tools=tools)
    assert ours == _official_text(tokenizer, TURNS[:1], tools, gen=True)
    assert "\nCalls to these tools must go to the commentary channel: 'functions'.<|end|>" in ours


def test_the_declarations_read_as_typescript(tok):
    tokenizer, _ = tok
    text = get_template("gpt_oss", tokenizer).render_prompt(TURNS[:1], system="Be brief.", tools=[WEATHER])
    assert text.split("<|start|>developer<|message|>")[1].split("<|start|>user")[0] == (
        "# Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n"
        "// Current weather in a city.\ntype get_weather = (_: {\n// The city, e.g. Paris.\ncity: string,\n"
        'unit?: "celsius" | "fahrenheit", // default: celsius,\n}) => any;\n\n} // namespace functions<|end|>'
    )


def _sft(folder, tmp_path, messages, tools, **options):
    return _prepared(folder, tmp_path, "sft", {"conversations": _sharegpt(messages)}, tools, **options)[0]


def _sharegpt(messages) -> list[dict]:
    return [{"from": SHAREGPT[m["role"]], "value": m["content"]} for m in messages]


def _prepared(folder, tmp_path, stage, record, tools, **options):
    """The rows ``stage`` trains on, from one sharegpt ``record`` (its other columns named as the record names
    them)."""
    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    columns = {"messages": "conversations", "tools": "tools"} | {k: k for k in record if k != "conversations"}
    entry = {"formatting": "sharegpt", "columns": columns} | ({"ranking": True} if "chosen" in record else {})
    if "label" in record:
        columns["kto_tag"] = columns.pop("label")
    write_dataset(tmp_path / "data", "toy", [record | {"tools": json.dumps(tools)}], entry)
    values = {
        "model_name_or_path": str(folder),
        "template": "gpt_oss",
        "dataset": "toy",
        "dataset_dir": str(tmp_path / "data"),
        "output_dir": str(tmp_path / "out"),
        "cutoff_len": 2048,
        "overwrite_cache": True,
    }
    cfg = load_config(None, values | {"stage": stage} | options)
    return prepare_datasets(cfg, load_tokenizer(cfg), stage).train


def _trained(tokenizer, row) -> str:
    return tokenizer.decode([t for t in row["labels"] if t != IGNORE])


def test_tool_conversation_with_mask_history_is_the_official_rendering(tok, tmp_path):
    """History as the official template renders it: the call's thought dropped (a final answer follows), the
    result as a JSON string; only the final reply (its thought, the answer, <|return|>) trained. The generation prompt
    after the result keeps the call's thought (no final answer follows yet), as the official template renders it."""
    tokenizer, folder = tok
    row = _sft(folder, tmp_path, TURNS, [WEATHER], mask_history=True)
    ids = _official_ids(tokenizer, HF, [WEATHER])
    start = len(ids) - len(tokenizer(_trained(tokenizer, row), add_special_tokens=False)["input_ids"])
    assert row["input_ids"] == ids and row["labels"] == [IGNORE] * start + ids[start:]
    assert tokenizer.decode(ids[:start]).endswith(
        "<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant to=functions.get_weather<|channel|>"
        'commentary json<|message|>{"city": "Paris", "unit": "celsius"}<|call|><|start|>functions.get_weather '
        'to=assistant<|channel|>commentary<|message|>"{\\"temperature\\": 21, \\"sky\\": \\"clear\\"}"<|end|>'
        "<|start|>assistant"
    )
    assert _trained(tokenizer, row) == (
        "<|channel|>analysis<|message|>It is clear.<|end|><|start|>assistant<|channel|>final<|message|>Sunny, 21 °C."
        "<|return|>"
    )
    prompt = get_template("gpt_oss", tokenizer).render_prompt(TURNS[:3], tools=[WEATHER])
    assert prompt == _official_text(tokenizer, HF[:3], [WEATHER], gen=True)  # chat, api: the call's thought kept
    assert "<|channel|>analysis<|message|>Ask the tool.<|end|><|start|>assistant to=functions.get_weather" in prompt


def test_every_reply_trained_trains_the_call_up_to_call(tok, tmp_path):
    """Each reply trained as the official template renders it when it is the last: the call after its thought, ending
    with <|call|> (where generation stops); the tool's result is prompt."""
    tokenizer, folder = tok
    row = _sft(folder, tmp_path, TURNS, [WEATHER])
    first = _official_ids(tokenizer, HF[:2], [WEATHER])  # the conversation ending with the call, as trained
    start = len(_official_ids(tokenizer, HF[:1], [WEATHER], gen=True))
    assert row["input_ids"][: len(first)] == first
    assert row["labels"][:start] == [IGNORE] * start and row["labels"][start : len(first)] == first[start:]
    assert _trained(tokenizer, row) == (
        "<|channel|>analysis<|message|>Ask the tool.<|end|><|start|>assistant to=functions.get_weather<|channel|>"
        'commentary json<|message|>{"city": "Paris", "unit": "celsius"}<|call|>'
        "<|channel|>analysis<|message|>It is clear.<|end|><|start|>assistant<|channel|>final<|message|>Sunny, 21 °C."
        "<|return|>"
    )


def test_a_call_without_a_thought_and_thinking_off(tok, tmp_path):
    tokenizer, folder = tok
    plain = [TURNS[0], {"role": "function_call", "content": CALL}]
    hf = [HF[0], {k: v for k, v in HF[1].items() if k != "thinking"}]
    row = _sft(folder, tmp_path / "a", plain, [WEATHER])
    assert row["input_ids"] == _official_ids(tokenizer, hf, [WEATHER])
    assert _trained(tokenizer, row) == (
        ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris", "unit": "celsius"}<|call|>'
    )
    # enable_thinking: false: the thought removed, the empty analysis message prompt (as for a final reply)
    off = _sft(folder, tmp_path / "b", TURNS[:2], [WEATHER], enable_thinking=False)
    empty = "<|start|>assistant<|channel|>analysis<|message|><|end|><|start|>assistant to="
    assert tokenizer.decode(off["input_ids"]) == _official_text(tokenizer, hf, [WEATHER]).replace(
        "<|start|>assistant to=", empty
    )
    assert _trained(tokenizer, off) == _trained(tokenizer, row)


def test_several_calls_in_one_message_are_refused_naming_the_record(tok, tmp_path):
    tokenizer, folder = tok
    two = json.dumps(
        [{"name": "get_weather", "arguments": ARGS}, {"name": "get_weather", "arguments": {"city": "Rome"}}]
    )
    with pytest.raises(DataError) as err:
        _sft(folder, tmp_path, [TURNS[0], {"role": "function_call", "content": two}], [WEATHER])
    assert "toy" in str(err.value) and (
        "message 1 holds 2 function calls (get_weather, get_weather); gpt-oss (harmony) makes one call per assistant "
        "message (its official chat template renders only the first): split them into one function_call / "
        "observation pair each"
    ) in str(err.value)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "tool 'f', parameter p: gpt-oss's official chat template cannot render 'anyOf' (it declares the parameter "
            'as \'any\'); write it as \'oneOf\' or a type list ("type": ["string", "null"])',
        ),
        (
            {"type": "object", "properties": {"q": {"$ref": "#/defs/Q"}}},
            "tool 'f', parameter p.q: gpt-oss's official chat template cannot render '$ref' (it declares the "
            "parameter as 'any'); write the referenced schema in place",
        ),
        ({"const": "x"}, "cannot render 'const'"),
        ({"allOf": [{"type": "string"}]}, "cannot render 'allOf'"),
        ({"type": "array", "items": {"not": {"type": "string"}}}, "tool 'f', parameter p[]: gpt-oss's"),
        (
            {"type": "string", "enum": ["a"], "default": 1},
            "tool 'f', parameter p: the default of an 'enum' / 'oneOf' parameter must be a string for gpt-oss's "
            "official chat template (it writes it as text), got 1",
        ),
        ({"type": "object", "properties": {"q": {}}, "required": "q"}, "'required' must be a list of property names"),
        ({"type": "array", "items": ["string"]}, "tool 'f', parameter p[]: a JSON schema must be an object"),
    ],
)
def test_schemas_the_official_macros_cannot_render_are_refused(schema, message):
    with pytest.raises(DataError) as err:
        get_template("gpt_oss").render_prompt(TURNS[:1], tools=[_tool({"p": schema})])
    assert message in str(err.value)


def test_other_refusals():
    tpl = get_template("gpt_oss")
    with pytest.raises(DataError, match="^tool 'f': gpt-oss's official chat template needs a string 'description'"):
        tpl.render_prompt(TURNS[:1], tools=[{"name": "f", "parameters": {}}])
    orphan = [TURNS[0], {"role": "assistant", "content": "Hm."}, {"role": "observation", "content": "1"}]
    with pytest.raises(DataError, match=r"^message 2 is a tool result \(observation\) that follows no function_call"):
        tpl.render_prompt(orphan, tools=[WEATHER])
    with pytest.raises(ConfigError, match="template 'gpt_oss' writes tools and calls in harmony's own format"):
        get_template("gpt_oss", tool_format="qwen")
    assert tpl.tool_format == "harmony" and "<|call|>" in tpl.stop_words


def test_a_trained_calls_thought_is_marked_for_thought_loss_weight():
    """The third text of a trained turn (what ``thought_loss_weight`` weighs) is the call's analysis message."""
    marked = get_template("gpt_oss").encode_turns_marked(TURNS, tools=[WEATHER])
    assert [m[2] for m in marked] == [
        "<|channel|>analysis<|message|>Ask the tool.<|end|><|start|>assistant",
        "<|channel|>analysis<|message|>It is clear.<|end|><|start|>assistant",
    ]
    assert marked[0][1].startswith(marked[0][2]) and marked[0][1].endswith("<|call|>")


def test_a_cut_with_mask_history_never_starts_at_the_tool_result(tok, tmp_path):
    """The oldest history goes first, but a kept run never begins at a tool result (its call would be cut away and
    harmony cannot write a result without its call): the run from the user's question is kept whole, or, when even
    it does not fit, the sample keeps nothing to train and is reported dropped."""
    tokenizer, folder = tok
    history = [{"role": "user", "content": "Hello " * 200}, {"role": "assistant", "content": "Hi."}]
    whole = _official_ids(tokenizer, HF, [WEATHER])
    row = _sft(folder, tmp_path, history + TURNS, [WEATHER], mask_history=True, cutoff_len=len(whole))
    assert row["input_ids"] == whole  # the conversation from the question on, as the official template renders it
    with pytest.raises(DataError, match=r"every sample was dropped \(no trainable tokens after cutoff_len"):
        _sft(folder, tmp_path, history + TURNS, [WEATHER], mask_history=True, cutoff_len=len(whole) - 1)


HISTORY = [{"role": "user", "content": "Hello " * 200}, {"role": "assistant", "content": "Hi."}]
RAINY = {"role": "assistant", "content": "<think>\nIt is clear.\n</think>\n\nRainy."}


def test_a_preference_pair_is_never_cut_to_start_at_the_tool_result(tok, tmp_path):
    """dpo / rm / kto cut the oldest history first too (``pairwise.py``, ``kto.py``): the run from the call's
    question is kept whole, as the official template renders it, or the pair is dropped and reported."""
    tokenizer, folder = tok
    whole = _official_ids(tokenizer, HF, [WEATHER])
    rainy = _official_ids(
        tokenizer, [*HF[:3], {"role": "assistant", "content": "Rainy.", "thinking": "It is clear."}], [WEATHER]
    )
    pair = {"conversations": _sharegpt(HISTORY + TURNS[:3]), "chosen": _sharegpt(TURNS[3:])[0]}
    pair["rejected"] = _sharegpt([RAINY])[0]
    (row,) = _prepared(folder, tmp_path, "dpo", pair, [WEATHER], cutoff_len=len(whole))
    assert (row["chosen_input_ids"], row["rejected_input_ids"]) == (whole, rainy)
    labels = [IGNORE] * row["_prompt_len"] + whole[row["_prompt_len"] :]
    assert row["chosen_labels"] == labels and tokenizer.decode(whole[row["_prompt_len"] :]).startswith("<|channel|>")
    with pytest.raises(DataError, match=r"every sample was dropped \(no trainable tokens after cutoff_len"):
        _prepared(folder, tmp_path, "dpo", pair, [WEATHER], cutoff_len=len(whole) - 1)

    record = {"conversations": _sharegpt(HISTORY + TURNS), "label": True}
    (row,) = _prepared(folder, tmp_path, "kto", record, [WEATHER], cutoff_len=len(whole))
    assert row["input_ids"] == whole and row["prompt_ids"] == whole[: row["_prompt_len"]]
    with pytest.raises(DataError, match=r"every sample was dropped \(no trainable tokens after cutoff_len"):
        _prepared(folder, tmp_path, "kto", record, [WEATHER], cutoff_len=len(whole) - 1)


def test_a_rollout_prompt_is_never_cut_to_start_at_the_tool_result(tok, tmp_path):
    """ppo / grpo prompts (``prompt.py``): a prompt that ends with a tool's result keeps the run from the call's
    question whole (the official generation prompt), or is dropped and reported."""
    tokenizer, folder = tok
    prompt = _official_ids(tokenizer, HF[:3], [WEATHER], gen=True)
    record = {"conversations": _sharegpt(HISTORY + TURNS)}
    (row,) = _prepared(folder, tmp_path, "ppo", record, [WEATHER], cutoff_len=len(prompt))
    assert row["input_ids"] == prompt
    with pytest.raises(DataError, match=r"every sample was dropped"):
        _prepared(folder, tmp_path, "ppo", record, [WEATHER], cutoff_len=len(prompt) - 1)
