"""Template rules: one history rule for every stage (qwen3 KTO), tools for empty/default, Llama-3's tool
list, ChatGLM3's last reply, and the switchable EOS of template 'empty'."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import CHAT_TEMPLATES, write_dataset
from tunekit.config import load_config
from tunekit.data.pipeline import prepare_datasets
from tunekit.data.templates import get_template
from tunekit.model.loader import load_tokenizer

render_jinja_template = pytest.importorskip("transformers.utils.chat_template_utils").render_jinja_template
FIXTURES = CHAT_TEMPLATES
TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}
IGNORE = -100

TOOLS = [
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
TOOL_CONV = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "function_call", "content": json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})},
    {"role": "observation", "content": '{"temp": 18}'},
    {"role": "assistant", "content": "18 degrees."},
]
DEFAULT_TOOL_TEXT = (  # LLaMA-Factory's tool_utils DefaultToolUtils.tool_formatter for TOOLS
    "You have access to the following tools:\n> Tool Name: get_weather\nTool Description: Weather\n"
    "Tool Args:\n  - city (string, required): City\n\nUse the following format if using a tool:\n```\n"
    "Action: tool name (one of [get_weather])\nAction Input: the input to the tool, in a JSON format representing "
    'the kwargs (e.g. ```{"input": "hello world", "num_beams": 5}```)\n```\n'
)


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory) -> Path:
    from tunekit.tiny.text import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3") / "model", like="qwen3", seed=0)


def _prepare(model, folder: Path, stage: str, records, entry, **opts):
    write_dataset(folder, "toy", records, entry)
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(model),
            "dataset": "toy",
            "dataset_dir": str(folder),
            "output_dir": str(folder / "out"),
            "stage": stage,
            "cutoff_len": 1024,
            **opts,
        },
    )
    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok, stage), tok


# --- one history rule -------------------------------------------------------------------------------


def test_kto_history_under_qwen3_is_the_official_history_like_dpo_and_sft(tiny_qwen3, tmp_path):
    history = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "Four."},
        {"role": "user", "content": "3+3?"},
    ]
    last = {"role": "assistant", "content": "<think>\nAdd three.\n</think>\n\nSix."}
    kto, tok = _prepare(
        tiny_qwen3,
        tmp_path / "kto",
        "kto",
        [{"messages": history + [last], "label": True}],
        {"formatting": "sharegpt", "columns": {"messages": "messages", "kto_tag": "label"}, "tags": TAGS},
        template="qwen3",
    )
    dpo, _ = _prepare(
        tiny_qwen3,
        tmp_path / "dpo",
        "dpo",
        [{"messages": history, "chosen": last, "rejected": {"role": "assistant", "content": "Seven."}}],
        {
            "ranking": True,
            "formatting": "sharegpt",
            "tags": TAGS,
            "columns": {"messages": "messages", "chosen": "chosen", "rejected": "rejected"},
        },
        template="qwen3",
    )
    sft, _ = _prepare(
        tiny_qwen3,
        tmp_path / "sft",
        "sft",
        [{"messages": history + [last]}],
        {"formatting": "sharegpt", "columns": {"messages": "messages"}, "tags": TAGS},
        template="qwen3",
        mask_history=True,
    )
    official = (FIXTURES / "qwen3.jinja").read_text(encoding="utf-8")
    prompt_text = render_jinja_template([history], chat_template=official, add_generation_prompt=True)[0][0]
    whole_text = render_jinja_template([history + [last]], chat_template=official)[0][0].removesuffix("\n")
    assert prompt_text == (
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\nFour.<|im_end|>\n"
        "<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n"
    )  # history without <think>
    prompt = tok(prompt_text, add_special_tokens=False)["input_ids"]
    whole = prompt + tok(whole_text[len(prompt_text) :], add_special_tokens=False)["input_ids"]
    k, d, s = kto.train[0], dpo.train[0], sft.train[0]
    assert k["prompt_ids"] == prompt and k["input_ids"] == whole
    assert d["chosen_input_ids"] == whole and d["chosen_input_ids"][: d["_prompt_len"]] == prompt
    assert s["input_ids"] == whole and s["labels"] == [IGNORE] * len(prompt) + whole[len(prompt) :]


# --- tools for empty and default --------------------------------------------------------------------


def test_empty_template_renders_tools_in_the_plain_default_format():
    turns = get_template("empty").encode_turns(TOOL_CONV, system="Sys.", tools=json.dumps(TOOLS))
    assert turns == [
        ("Sys." + DEFAULT_TOOL_TEXT + "Weather in Paris?", 'Action: get_weather\nAction Input: {"city": "Paris"}</s>'),
        ('{"temp": 18}', "18 degrees.</s>"),
    ]
    # as LLaMA-Factory's 'empty' (empty_template_eos: false): replies and calls without EOS
    turns = get_template("empty", empty_eos=False).encode_turns(TOOL_CONV, tools=TOOLS)
    assert turns == [
        (DEFAULT_TOOL_TEXT + "Weather in Paris?", 'Action: get_weather\nAction Input: {"city": "Paris"}'),
        ('{"temp": 18}', "18 degrees."),
    ]
    assert (
        get_template("default")
        .encode_turns(TOOL_CONV, tools=TOOLS)[0][0]
        .startswith("System: " + DEFAULT_TOOL_TEXT + "</s>")
    )


def test_empty_template_eos_option_switches_the_trained_eos(tiny_qwen, tmp_path):
    records = [{"instruction": "Hi", "output": "Hello!"}]
    on, tok = _prepare(tiny_qwen, tmp_path / "on", "sft", records, None, template="empty")
    off, _ = _prepare(tiny_qwen, tmp_path / "off", "sft", records, None, template="empty", empty_template_eos=False)
    ids = lambda t: tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    assert on.train[0]["input_ids"] == ids("Hi") + ids("Hello!" + tok.eos_token)
    assert off.train[0]["input_ids"] == ids("Hi") + ids("Hello!")
    assert off.train[0]["labels"] == [IGNORE] * len(ids("Hi")) + ids("Hello!")
    with pytest.raises(Exception, match="empty_template_eos"):
        load_config(None, {"model_name_or_path": str(tiny_qwen), "empty_template_eos": "maybe"})


# --- family formats ---------------------------------------------------------------------------------


def test_llama3_tools_keep_the_blank_line_after_the_last_schema():
    prompt = get_template("llama3").encode_turns(TOOL_CONV, system="  Be brief.  ", tools=TOOLS)[0][0]
    schema = json.dumps({"type": "function", "function": TOOLS[0]}, indent=4)
    # Llama 3.1's official template writes every schema as `t | tojson(indent=4)` followed by "\n\n", then the
    # system message; tunekit keeps LLaMA-Factory's order (system first) and trims only the system message
    assert prompt == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Be brief.Cutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\nYou have access to the following functions. To call a function, please respond "
        'with JSON for a function call. Respond in the format {"name": function name, "parameters": dictionary of '
        "argument name and its value}. Do not use variables.\n\n" + schema + "\n\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n"
        "Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    # without tools the system message is still trimmed, as the official template does
    assert (
        get_template("llama3")
        .render_prompt(TOOL_CONV[:1], system=" S ")
        .startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>")
    )


def test_chatglm3_last_reply_ends_with_eos_like_its_finetune_demo():
    conv = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "Bye!"},
    ]
    turns = get_template("chatglm3").encode_turns(conv)
    # THUDM's ChatGLM3 finetune_demo appends eos_token_id (</s>) after the last message and trains it; a reply
    # before another turn ends with the next role token, which the shifted loss mask trains too
    assert turns == [
        ("[gMASK]sop<|user|>\n Hi<|assistant|>", "\n Hello!<|user|>"),
        ("\n Bye<|assistant|>", "\n Bye!</s>"),
    ]
    assert get_template("glm4").encode_turns(conv)[-1][1] == "\nBye!<|user|>"  # GLM-4's demo ends with <|user|>
