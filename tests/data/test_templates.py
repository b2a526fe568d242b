"""Chat templates: pinned renderings of every template, turn splits, reasoning, tools, errors."""

from __future__ import annotations

import json

import pytest

from tunekit.data.templates import Template, get_template, harmony, list_templates
from tunekit.errors import ConfigError, DataError

CONV = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "How are you?"},
    {"role": "assistant", "content": "Fine."},
]
SYSTEM = "Be brief."

# The whole training string of CONV with SYSTEM, written out per template (checked by hand against each
# family's official chat_template; test_templates_official.py checks the same against the templates).
PINNED = {
    "default": "System: Be brief.</s>\nHuman: Hi</s>\nAssistant:Hello!</s>\nHuman: How are you?</s>\n"
    "Assistant:Fine.</s>",
    "alpaca": "Be brief.### Instruction:\nHi\n\n### Response:\nHello!</s>\n\n### Instruction:\nHow are you?\n\n"
    "### Response:\nFine.</s>",
    "empty": "Be brief.HiHello!</s>How are you?Fine.</s>",
    "vicuna": "Be brief. USER: Hi ASSISTANT: Hello!</s>USER: How are you? ASSISTANT: Fine.</s>",
    "qwen": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    "Hello!<|im_end|>\n"
    "<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\nFine.<|im_end|>",
    # Qwen2-VL's official template, text only
    "qwen2_vl": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    "Hello!<|im_end|>\n"
    "<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\nFine.<|im_end|>",
    "qwen3": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    "<think>\n\n</think>\n\n"
    "Hello!<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    "Fine.<|im_end|>",
    "qwen3_nothink": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    "Hello!<|im_end|>\n"
    "<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\nFine.<|im_end|>",
    "qwen3_vl": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    "<think>\n\n</think>\n\n"
    "Hello!<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    "Fine.<|im_end|>",
    # Qwen3-VL-Instruct's official template, text only
    "qwen3_vl_nothink": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    "<|im_start|>assistant\nHello!<|im_end|>\n"
    "<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\nFine.<|im_end|>",
    # Qwen2-Audio-Instruct's official template, text only
    "qwen2_audio": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    "Hello!<|im_end|>\n"
    "<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\nFine.<|im_end|>",
    "llama3": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
    "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
    "How are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nFine.<|eot_id|>",
    "llama2": "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n"
    "Hi [/INST] Hello! </s><s>[INST] How are you? [/INST] Fine. </s>",
    "mistral": "<s>[INST] Hi[/INST] Hello!</s>[INST] Be brief.\n\nHow are you?[/INST] Fine.</s>",
    "gemma": "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
    "<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\nFine.<end_of_turn>",
    "glm4": "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi<|assistant|>\nHello!<|user|>\nHow are you?<|assistant|>\n"
    "Fine.<|user|>",
    "chatglm3": "[gMASK]sop<|system|>\n Be brief.<|user|>\n Hi<|assistant|>\n Hello!<|user|>\n"
    " How are you?<|assistant|>\n Fine.</s>",
    "deepseek3": "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>How "
    "are you?"
    "<｜Assistant｜>Fine.<｜end▁of▁sentence｜>",
    "phi4": "<|im_start|>system<|im_sep|>Be brief.<|im_end|><|im_start|>user<|im_sep|>Hi<|im_end|>"
    "<|im_start|>assistant<|im_sep|>"
    "Hello!<|im_end|><|im_start|>user<|im_sep|>How are you?<|im_end|><|im_start|>assistant<|im_sep|>Fine.<|im_end|>",
    "yi": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    "Hello!<|im_end|>\n"
    "<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\nFine.<|im_end|>",
    # LLaVA-1.5 / LLaVA-NeXT: the llava-hf format with </s> after each reply; Gemma 3: Gemma's turns (vlm_specs.py)
    "llava": "Be brief. USER: Hi ASSISTANT: Hello!</s>USER: How are you? ASSISTANT: Fine.</s>",
    "llava_next": "Be brief. USER: Hi ASSISTANT: Hello!</s>USER: How are you? ASSISTANT: Fine.</s>",
    # LLaVA-NeXT on Mistral: transformers' chat_mistral with </s> after each reply, the system in the first user turn
    "llava_next_mistral": "[INST] Be brief.\n\nHi [/INST] Hello!</s>[INST] How are you? [/INST] Fine.</s>",
    # LLaVA-NeXT on Llama 3: Llama 3's turns (no BOS here: the tokenizer adds it), contents not trimmed
    "llava_next_llama3": "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
    "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
    "\n\nFine.<|eot_id|>",
    "gemma3": "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
    "<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\nFine.<end_of_turn>",
    # SmolVLM / Idefics3: transformers' SmolVLM template (vlm_specs.py), text only
    "smolvlm": "<|im_start|>System: Be brief.<end_of_utterance>\nUser: Hi<end_of_utterance>\n"
    "Assistant: Hello!<end_of_utterance>\n"
    "User: How are you?<end_of_utterance>\nAssistant: Fine.<end_of_utterance>",
    "idefics3": "<|begin_of_text|>System: Be brief.<end_of_utterance>\nUser: Hi<end_of_utterance>\nAssistant: Hello!"
    "<end_of_utterance>\nUser: How are you?<end_of_utterance>\nAssistant: Fine.<end_of_utterance>",
    "baichuan2": "Be brief.<reserved_106>Hi<reserved_107>Hello!<reserved_106>How are you?<reserved_107>Fine.</s>",
    # DeepSeek-V2 chat, DeepSeek-R1 (the prompt opens the thought), gpt-oss's harmony (reasoning_specs.py, harmony.py)
    "deepseek": "<｜begin▁of▁sentence｜>Be brief.\n\nUser: Hi\n\nAssistant: Hello!<｜end▁of▁sentence｜>"
    "User: How are you?\n\nAssistant: Fine.<｜end▁of▁sentence｜>",
    "deepseekr1": "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜><think>\n\n</think>\n\n"
    "Hello!<｜end▁of▁sentence｜><｜User｜>How are you?<｜Assistant｜><think>\n\n</think>\n\n"
    "Fine.<｜end▁of▁sentence｜>",
    "gpt_oss": "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    f"Knowledge cutoff: 2024-06\nCurrent date: {harmony.today()}\n\nReasoning: medium\n\n# Valid channels: "
    "analysis, commentary, final. Channel must be included for every message.<|end|><|start|>developer<|message|>"
    "# Instructions\n\nBe brief.\n\n<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final"
    "<|message|>Hello!<|return|><|start|>user<|message|>How are you?<|end|><|start|>assistant<|channel|>final"
    "<|message|>Fine.<|return|>",
}


def test_every_template_is_pinned():
    assert sorted(PINNED) == sorted(n for n in list_templates() if n != "jinja")


@pytest.mark.parametrize("name", sorted(PINNED))
def test_pinned_rendering(name):
    tpl = get_template(name)
    turns = tpl.encode_turns(CONV, system=SYSTEM)
    assert len(turns) == 2
    assert "".join(p + r for p, r in turns) == PINNED[name]
    # the last prompt is exactly the generation prompt of the conversation before the reply (reasoning templates: with
    # earlier replies as the official history, which drops their thoughts)
    if tpl.spec.reasoning:
        turns = tpl.encode_turns(CONV, system=SYSTEM, strip_history_thoughts=True)
    assert "".join(p + r for p, r in turns[:1]) + turns[1][0] == tpl.render_prompt(CONV[:3], system=SYSTEM)


def test_turn_splits_end_at_the_stop_token():
    qwen = get_template("qwen").encode_turns(CONV, system=SYSTEM)
    assert qwen == [
        (
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
            "Hello!<|im_end|>",
        ),
        ("\n<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n", "Fine.<|im_end|>"),
    ]
    assert get_template("llama2").encode_turns(CONV) == [
        ("<s>[INST] Hi [/INST]", " Hello! </s>"),
        ("<s>[INST] How are you? [/INST]", " Fine. </s>"),
    ]
    # vicuna: the generation prompt ends with "ASSISTANT:" (FastChat), so the reply starts with the space
    assert get_template("vicuna").encode_turns(CONV[:2])[0][1] == " Hello!</s>"
    # GLM: no end-of-turn token, the next <|user|> ends a reply and is trained with it
    assert get_template("glm4").encode_turns(CONV) == [
        ("[gMASK]<sop><|user|>\nHi<|assistant|>", "\nHello!<|user|>"),
        ("\nHow are you?<|assistant|>", "\nFine.<|user|>"),
    ]


def test_default_system_and_explicit_system():
    qwen = get_template("qwen")
    assert qwen.default_system == "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    assert qwen.render_prompt(CONV[:1]).startswith(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    )
    assert get_template("qwen3").default_system is None
    assert get_template("qwen3").render_prompt(CONV[:1]) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_stop_words():
    assert get_template("qwen").stop_words == ["<|im_end|>"]
    assert get_template("llama3").stop_words == ["<|eot_id|>", "<|eom_id|>"]
    assert get_template("glm4").stop_words == ["<|user|>", "<|observation|>", "<|endoftext|>"]
    assert get_template("default").stop_words == ["</s>"]


def test_trimming_follows_the_official_templates():
    msgs = [{"role": "user", "content": "  Hi \n"}, {"role": "assistant", "content": "\n Hello! "}]
    assert (
        get_template("llama3")
        .render(msgs)
        .endswith("\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>")
    )
    assert get_template("llama2").render(msgs) == "<s>[INST] Hi [/INST] Hello! </s>"
    assert get_template("mistral").render(msgs) == "<s>[INST]   Hi \n[/INST] Hello!</s>"
    assert (
        get_template("qwen")
        .render(msgs)
        .endswith("user\n  Hi \n<|im_end|>\n<|im_start|>assistant\n\n Hello! <|im_end|>")
    )


# --- reasoning (qwen3) ---------------------------------------------------------------------------

THINK = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4"},
    {"role": "user", "content": "3+3?"},
    {"role": "assistant", "content": "6"},
]


def test_qwen3_thinking_on_trains_the_thought():
    turns = get_template("qwen3").encode_turns(THINK)
    assert turns == [
        ("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n", "<think>\nAdd them.\n</think>\n\n4<|im_end|>"),
        ("\n<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n", "<think>\n\n</think>\n\n6<|im_end|>"),
    ]


def test_qwen3_thinking_off_puts_the_empty_block_in_the_prompt():
    turns = get_template("qwen3").encode_turns(THINK, enable_thinking=False)
    assert turns == [
        ("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", "4<|im_end|>"),
        ("\n<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", "6<|im_end|>"),
    ]
    assert (
        get_template("qwen3")
        .render_prompt(THINK[:3], enable_thinking=False)
        .endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    )


def test_qwen3_official_history_drops_old_thoughts():
    tpl = get_template("qwen3")
    # inference: history replies lose their <think> block, as in the official template
    assert tpl.render_prompt(THINK[:3]) == (
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n"
    )
    turns = tpl.encode_turns(THINK, strip_history_thoughts=True)
    assert turns[0] == ("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n", "4<|im_end|>")
    assert turns[1][1] == "<think>\n\n</think>\n\n6<|im_end|>"
    assert "".join(p + r for p, r in turns[:1]) + turns[1][0] == tpl.render_prompt(THINK[:3])


def test_qwen3_normalizes_thought_whitespace_like_the_official_template():
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>r</think>a"}]
    assert get_template("qwen3").encode_turns(msgs)[0][1] == "<think>\nr\n</think>\n\na<|im_end|>"


def test_qwen3_nothink_ignores_enable_thinking():
    tpl = get_template("qwen3_nothink")
    assert tpl.encode_turns(CONV[:2], enable_thinking=False) == tpl.encode_turns(CONV[:2], enable_thinking=True)
    assert "<think>" not in tpl.render(CONV)


# --- tools ---------------------------------------------------------------------------------------

TOOLS = json.dumps(
    [
        {
            "name": "get_weather",
            "description": "Weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "City"}},
                "required": ["city"],
            },
        }
    ]
)
TOOL_CONV = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "function_call", "content": json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})},
    {"role": "observation", "content": '{"temp": 18}'},
    {"role": "assistant", "content": "18 degrees."},
]


def test_qwen_tool_calling_hermes_format():
    turns = get_template("qwen").encode_turns(TOOL_CONV, system="S", tools=TOOLS)
    assert turns[0][0].startswith("<|im_start|>system\nS\n\n# Tools\n\nYou may call one or more functions")
    assert (
        '\n<tools>\n{"type": "function", "function": {"name": "get_weather", "description": "Weather"' in turns[0][0]
    )
    assert (
        turns[0][1] == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
    )
    assert turns[1] == (
        '\n<|im_start|>user\n<tool_response>\n{"temp": 18}\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
        "18 degrees.<|im_end|>",
    )


def test_default_tool_format_like_llamafactory():
    turns = get_template("default").encode_turns(TOOL_CONV, tools=TOOLS)
    assert turns[0][0] == (
        "System: You have access to the following tools:\n> Tool Name: get_weather\nTool Description: Weather\n"
        "Tool Args:\n  - city (string, required): City\n\nUse the following format if using a tool:\n```\n"
        "Action: tool name (one of [get_weather])\nAction Input: the input to the tool, in a JSON format representing "
        'the kwargs (e.g. ```{"input": "hello world", "num_beams": 5}```)\n```\n</s>\nHuman: Weather in Paris?</s>\n'
        "Assistant:"
    )
    assert turns[0][1] == 'Action: get_weather\nAction Input: {"city": "Paris"}</s>'
    assert turns[1][0] == '\nHuman: {"temp": 18}</s>\nAssistant:'


def test_glm4_function_call_uses_the_observation_token():
    turns = get_template("glm4").encode_turns(TOOL_CONV, tools=TOOLS)
    assert turns[0][1] == 'get_weather\n{"city": "Paris"}<|observation|>'
    assert turns[1] == ('\n{"temp": 18}<|assistant|>', "\n18 degrees.<|user|>")


def test_templates_without_tools_raise():
    tpl = get_template("empty")
    tpl.tool_format = None  # no named template lacks a tool format now ('empty' has LLaMA-Factory's default)
    with pytest.raises(ConfigError, match="'empty' cannot express tools"):
        tpl.encode_turns(CONV, tools=TOOLS)


# --- errors --------------------------------------------------------------------------------------


def test_unknown_template_names_close_matches():
    with pytest.raises(ConfigError) as err:
        get_template("qwen2")
    assert "unknown template 'qwen2'. Did you mean: qwen, qwen3" in str(err.value)
    assert "tunekit templates" in str(err.value)


def test_jinja_mode_needs_a_chat_template():
    with pytest.raises(ConfigError, match="no tokenizer was given"):
        get_template("jinja")

    class NoTemplate:
        chat_template = None

    with pytest.raises(ConfigError, match="this tokenizer has no chat_template"):
        get_template("jinja", NoTemplate())


def test_bad_conversations_are_data_errors():
    tpl = get_template("qwen")
    with pytest.raises(DataError, match="message 1 has role 'user'"):
        tpl.encode_turns([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    with pytest.raises(DataError, match="must end with an assistant"):
        tpl.encode_turns(CONV[:3])
    with pytest.raises(DataError, match="ending with a user/observation"):
        tpl.render_prompt(CONV)
    with pytest.raises(DataError, match="function_call message must be JSON"):
        tpl.encode_turns([{"role": "user", "content": "a"}, {"role": "function_call", "content": "nope"}])


def test_public_api_types():
    tpl = get_template("llama3")
    assert isinstance(tpl, Template) and tpl.name == "llama3"
    assert list_templates()[-1] == "jinja" and len(list_templates()) == len(PINNED) + 1  # every named one is pinned
