"""Parity: tunekit's templates vs the families' official HF chat templates, and vs their own export.

Official templates are rendered with transformers' own renderer (``render_jinja_template``), i.e. exactly
what ``tokenizer.apply_chat_template`` produces.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import CHAT_TEMPLATES
from tunekit.data.templates import get_template, list_templates

render_jinja_template = pytest.importorskip("transformers.utils.chat_template_utils").render_jinja_template

FIXTURES = CHAT_TEMPLATES

U = lambda c: {"role": "user", "content": c}  # noqa: E731
A = lambda c: {"role": "assistant", "content": c}  # noqa: E731

# (system, messages)
CONVERSATIONS = [
    (None, [U("Hi"), A("Hello!")]),
    ("You are terse.", [U("What is 2+2?"), A("4")]),
    ("Answer in French.", [U("Hello"), A("Bonjour !"), U("How are you?"), A("Très bien."), U("Bye"), A("Au revoir.")]),
    (None, [U("  spaced question \n"), A("\n spaced answer  "), U("Quote ' and \\ and {{ x }}"), A("ok 'quoted'")]),
    (None, [U("你好"), A("你好！有什么可以帮你？")]),
]

SPECIAL = {  # standard special-token strings of each family (what its tokenizer passes to the template)
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama2": {"bos_token": "<s>", "eos_token": "</s>"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>"},
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>"},
    "deepseek3": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
}
OFFICIAL = [
    "qwen",
    "qwen3",
    "qwen3_nothink",
    "llama3",
    "llama2",
    "mistral",
    "gemma",
    "glm4",
    "chatglm3",
    "deepseek3",
    "phi4",
]


def hf(system, messages):
    out = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m["role"] == "function_call":
            call = json.loads(m["content"])
            out.append({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]})
        elif m["role"] == "observation":
            out.append({"role": "tool", "content": m["content"]})
        else:
            out.append(dict(m))
    return out


def render(template: str, messages, gen: bool, **kw) -> str:
    return render_jinja_template([messages], chat_template=template, add_generation_prompt=gen, **kw)[0][0]


def official(name: str) -> str:
    return (FIXTURES / f"{name}.jinja").read_text(encoding="utf-8")


def supported(name, system):
    return not (name == "gemma" and system)  # Gemma's template raises on a system message


@pytest.mark.parametrize("name", OFFICIAL)
def test_generation_prompts_equal_the_official_template(name):
    tpl, jinja, special = get_template(name), official(name), SPECIAL.get(name, {})
    checked = 0
    for system, msgs in CONVERSATIONS:
        if not supported(name, system):
            continue
        for k in range(0, len(msgs), 2):
            ours = tpl.render_prompt(msgs[: k + 1], system=system)
            assert ours == render(jinja, hf(system, msgs[: k + 1]), True, **special), (name, system, k)
            checked += 1
    assert checked >= 4


@pytest.mark.parametrize("name", OFFICIAL)
def test_training_strings_equal_the_official_template(name):
    tpl, jinja, special = get_template(name), official(name), SPECIAL.get(name, {})
    for system, msgs in CONVERSATIONS:
        if not supported(name, system) or (name == "mistral" and system):
            continue  # Mistral's template drops the system prompt unless the last message is a user's
        kw = {"strip_history_thoughts": True} if name == "qwen3" else {}
        ours = "".join(p + r for p, r in tpl.encode_turns(msgs, system=system, **kw))
        expected = render(jinja, hf(system, msgs), False, **special)
        if name in ("qwen", "qwen3", "qwen3_nothink"):
            expected = expected.removesuffix("\n")  # the separator after the last <|im_end|> is not trained
        if name == "glm4":
            expected += "<|user|>"  # the trained end of the last reply (THUDM's GLM-4 finetune demo)
        if name == "chatglm3":
            expected += "</s>"  # ChatGLM3's finetune demo ends the sequence with eos_token_id (trained)
        if name == "gemma":
            expected = expected.removesuffix("\n")
        assert ours == expected, (name, system)


def test_qwen3_training_mode_equals_trl_training_template():
    """Default qwen3 training keeps a <think> block on every reply, like TRL's prefix-preserving template."""
    tpl, trl = get_template("qwen3"), official("qwen3_training_trl")
    for system, msgs in CONVERSATIONS:
        ours = "".join(p + r for p, r in tpl.encode_turns(msgs, system=system))
        assert ours + "\n" == render(trl, hf(system, msgs), False), system


def test_qwen3_reasoning_and_enable_thinking_match_official():
    tpl, jinja = get_template("qwen3"), official("qwen3")
    msgs = [U("2+2?"), A("<think>\nAdd.\n</think>\n\n4"), U("3+3?"), A("<think>\nAdd again.\n</think>\n\n6")]
    for thinking in (True, False):
        prompt = tpl.render_prompt(msgs[:3], enable_thinking=thinking)
        assert prompt == render(jinja, hf(None, msgs[:3]), True, enable_thinking=thinking)
    full = "".join(p + r for p, r in tpl.encode_turns(msgs, strip_history_thoughts=True))
    assert full + "\n" == render(jinja, hf(None, msgs), False)
    # thinking off: no thought is trained; the full string is the official one of the thought-less reply
    off = tpl.encode_turns(msgs, enable_thinking=False, strip_history_thoughts=True)
    assert off[-1] == (
        "\n<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        "6<|im_end|>",
    )
    assert "".join(p + r for p, r in off) + "\n" == render(
        jinja, hf(None, [U("2+2?"), A("4"), U("3+3?"), A("6")]), False
    )


TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
TOOL_MSGS = [
    U("Weather in Paris and Rome?"),
    {
        "role": "function_call",
        "content": json.dumps(
            [
                {"name": "get_weather", "arguments": {"city": "Paris"}},
                {"name": "get_weather", "arguments": {"city": "Rome"}},
            ]
        ),
    },
    {"role": "observation", "content": '{"Paris": 18, "Rome": 24}'},
    A("Paris 18 °C, Rome 24 °C."),
]


@pytest.mark.parametrize("name", ["qwen", "qwen3", "qwen3_nothink"])
@pytest.mark.parametrize("system", [None, "Be helpful."])
def test_qwen_tool_calls_match_official(name, system):
    tpl, jinja = get_template(name), official(name)
    hf_tools = [{"type": "function", "function": t} for t in TOOLS]
    calls = json.loads(TOOL_MSGS[1]["content"])
    hf_msgs = hf(system, [TOOL_MSGS[0]]) + [
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": c} for c in calls]},
        {"role": "tool", "content": TOOL_MSGS[2]["content"]},
        {"role": "assistant", "content": TOOL_MSGS[3]["content"]},
    ]
    tools = json.dumps(TOOLS)
    assert tpl.render_prompt(TOOL_MSGS[:1], system=system, tools=tools) == render(
        jinja, hf_msgs[: len(hf_msgs) - 3], True, tools=hf_tools
    )
    assert tpl.render_prompt(TOOL_MSGS[:3], system=system, tools=tools) == render(
        jinja, hf_msgs[:-1], True, tools=hf_tools
    )
    kw = {"strip_history_thoughts": True} if name == "qwen3" else {}
    full = "".join(p + r for p, r in tpl.encode_turns(TOOL_MSGS, system=system, tools=tools, **kw))
    assert full + "\n" == render(jinja, hf_msgs, False, tools=hf_tools)


# --- export: chat_template_jinja() renders exactly what tunekit renders -----------------------------


@pytest.mark.parametrize("name", [n for n in list_templates() if n != "jinja"])
def test_exported_chat_template_matches_tunekit(name):
    tpl = get_template(name)
    jinja = tpl.chat_template_jinja()
    if tpl.spec.reasoning and not tpl.spec.official_jinja:  # qwen3_vl: the model folder keeps its own template
        assert jinja is None
        return
    assert isinstance(jinja, str) and jinja
    kw = {"strip_history_thoughts": True} if name == "qwen3" else {}
    for system, msgs in CONVERSATIONS:
        for k in range(0, len(msgs), 2):
            assert render(jinja, hf(system, msgs[: k + 1]), True) == tpl.render_prompt(msgs[: k + 1], system=system), (
                name,
                k,
            )
        full = render(jinja, hf(system, msgs), False)
        ours = "".join(p + r for p, r in tpl.encode_turns(msgs, system=system, **kw))
        assert full.removesuffix(tpl.spec.sep) == ours, (name, system)


def test_exported_template_bakes_the_tokenizer_strings():
    class Tok:
        bos_token, eos_token, bos_token_id = "<BOS>", "<EOS>", 1

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [1, 5]}

    tpl = get_template("llama2", Tok())
    assert tpl.render(CONVERSATIONS[0][1]) == "<BOS>[INST] Hi [/INST] Hello! <EOS>"
    assert (
        render(tpl.chat_template_jinja(), hf(None, CONVERSATIONS[0][1]), False)
        == "<BOS>[INST] Hi [/INST] Hello! <EOS>"
    )
    # default: BOS only if the tokenizer itself adds one
    assert get_template("default", Tok()).render(CONVERSATIONS[0][1]).startswith("<BOS>Human: Hi<EOS>")
    assert get_template("default").render(CONVERSATIONS[0][1]).startswith("Human: Hi</s>")


def test_qwen3_function_call_with_thought_matches_official():
    tpl, jinja = get_template("qwen3"), official("qwen3")
    call = {"name": "get_weather", "arguments": {"city": "Paris"}}
    msgs = [
        U("Weather in Paris?"),
        {"role": "function_call", "content": "<think>\nI need the tool.\n</think>\n\n" + json.dumps(call)},
        {"role": "observation", "content": "18"},
        A("<think>\nGot it.\n</think>\n\nIt is 18 °C."),
    ]
    hf_msgs = [
        U("Weather in Paris?"),
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "I need the tool.",
            "tool_calls": [{"type": "function", "function": call}],
        },
        {"role": "tool", "content": "18"},
        A("<think>\nGot it.\n</think>\n\nIt is 18 °C."),
    ]
    hf_tools = [{"type": "function", "function": t} for t in TOOLS]
    tools = json.dumps(TOOLS)
    turns = tpl.encode_turns(msgs, tools=tools)
    assert (
        turns[0][1] == "<think>\nI need the tool.\n</think>\n\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
    )
    assert "".join(p + r for p, r in turns) + "\n" == render(jinja, hf_msgs, False, tools=hf_tools)
    assert tpl.render_prompt(msgs[:3], tools=tools) == render(jinja, hf_msgs[:3], True, tools=hf_tools)


def test_export_carries_a_configured_default_system_and_thinking_default():
    for name in ("qwen", "qwen3", "llama3", "alpaca"):
        tpl = get_template(name)
        tpl.default_system = "Custom default."  # data option default_system
        msgs = [U("Hi")]
        assert render(tpl.chat_template_jinja(), hf(None, msgs), True) == tpl.render_prompt(msgs), name
        assert "Custom default." in tpl.render_prompt(msgs)
        assert render(tpl.chat_template_jinja(), hf("Own.", msgs), True) == tpl.render_prompt(msgs, system="Own."), (
            name
        )
    qwen3 = get_template("qwen3")
    off = qwen3.chat_template_jinja(enable_thinking=False)
    assert render(off, hf(None, [U("Hi")]), True) == qwen3.render_prompt([U("Hi")], enable_thinking=False)
    assert render(off, hf(None, [U("Hi")]), True, enable_thinking=True) == qwen3.render_prompt([U("Hi")])
