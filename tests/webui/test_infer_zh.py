"""The inference engine's errors a user meets in the board's Chat tab (and the API), said in the page's language:
the template not set, control tokens in a request, generation options, media the model cannot read.
Each is keyed (``config/problem_texts_infer.py``); the English is unchanged word for word, the Chinese
(``webui/problems_zh_infer.py``) has no untranslated English (``tests/zh_words.py``)."""

from __future__ import annotations

import string
from types import SimpleNamespace

import pytest

from tests.zh_words import HAN, option_words, said_in_both, untranslated, value_words
from tunekit.config import load_config
from tunekit.config.problem_texts_infer import ENGLISH_INFER
from tunekit.errors import ConfigError, DataError
from tunekit.webui.problems_zh import ZH, say_error

ALLOWED = option_words()
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def engine(tiny_qwen):
    from tunekit.infer.engine import ChatEngine

    cfg = dict(model_name_or_path=str(tiny_qwen), template="qwen", do_sample=False, max_new_tokens=4)
    return ChatEngine(load_config(None, cfg))


def test_every_inference_template_is_chinese():
    """Every key, its placeholders filled with a number, is Chinese with no untranslated English: also the ones no
    cheap test reaches (a vision-language folder under template jinja)."""
    for key in ENGLISH_INFER:
        names = {name for _t, name, _s, _c in string.Formatter().parse(ZH[key]) if name}
        text = ZH[key].format(**dict.fromkeys(names, 1))
        assert HAN.search(text) or key == "infer_where", key  # "{where}: {error}": the error is said in Chinese
        assert untranslated(text, ALLOWED) == [], (key, text)


def test_template_not_set(tiny_qwen):
    from tunekit.infer.engine import ChatEngine

    tokenizer = SimpleNamespace(chat_template=None)
    with pytest.raises(ConfigError) as err:
        ChatEngine(load_config(None, dict(model_name_or_path=str(tiny_qwen))), tokenizer=tokenizer)
    said_in_both(
        err.value,
        "template is not set and the tokenizer has no chat_template: set template "
        "(e.g. qwen, llama3; `tunekit templates` lists them).",
        "未设置 template，且分词器没有 chat_template：请设置 template（例如 `qwen`、`llama3`；"
        "`tunekit templates` 会列出全部模板）。",
    )
    assert err.value.problems[0].fields == ("template",)


def test_control_tokens_in_tools_and_tool_calls(engine):
    tools = [{"type": "function", "function": {"name": "f", "description": "x<|im_end|>", "parameters": {}}}]
    with pytest.raises(ConfigError) as err:
        engine.render(HI, tools=tools, parse_special_tokens=False)
    said_in_both(
        err.value,
        "the tool definitions contain the control token '<|im_end|>'; remove it "
        "(tool names, descriptions and schemas cannot carry control tokens).",
        "工具定义中含有控制 token '<|im_end|>'：请删除它（工具的名称、描述和参数结构中不能出现控制 token）。",
    )
    call = {"role": "function_call", "content": '{"name": "f", "arguments": {"a": "<|im_end|>"}}'}
    with pytest.raises(ConfigError) as err:
        engine.render([*HI, call, {"role": "observation", "content": "1"}], parse_special_tokens=False)
    said_in_both(
        err.value,
        "messages[1]: a tool call contains the control token '<|im_end|>'; remove it "
        "(tool-call arguments cannot carry control tokens).",
        "`messages[1]`：工具调用中含有控制 token '<|im_end|>'：请删除它（工具调用的参数中不能出现控制 token）。",
    )


def test_generation_options_in_the_boards_chat(engine):
    """The Chat tab's reply fails with the engine's keyed message, in the page's language."""
    from tunekit.webui.chat import ChatSession

    chat = ChatSession()
    chat.engine = engine
    *_, last = chat.turn(None, "hi", lang="zh", max_new_tokens=0)
    assert last["shown"][-1] == {"role": "assistant", "content": "⚠ max_new_tokens 至少为 1，当前为 0。"}
    *_, last = chat.turn(None, "hi", lang="en", max_new_tokens=0)
    assert last["shown"][-1] == {"role": "assistant", "content": "⚠ max_new_tokens must be at least 1, got 0."}
    with pytest.raises(ConfigError) as err:
        engine.start(HI, bogus=1, colour=2)
    known = (
        "max_new_tokens, temperature, top_p, top_k, repetition_penalty, do_sample, num_beams, length_penalty, "
        "stop, seed"
    )
    said_in_both(
        err.value,
        f"unknown generation option(s) bogus, colour; known: {known}.",
        f"未知的生成参数 bogus、colour；可用的参数：{known.replace(', ', '、')}。",
    )


def test_images_in_a_text_only_chat(engine):
    with pytest.raises(ConfigError) as err:
        engine.render_media(HI, ["a.png"])
    said_in_both(
        err.value,
        "images need a vision-language model with its multimodal template (qwen2_vl for Qwen2-VL / Qwen2.5-VL); "
        "template 'qwen' is text-only.",
        "图片需要视觉语言模型及其多模态模板（Qwen2-VL / Qwen2.5-VL 用 `qwen2_vl`）；模板 'qwen' 只能处理文本。",
    )


def test_media_the_model_cannot_read():
    from tunekit.infer.media_prompt import check_kinds

    text_only = SimpleNamespace(cfg=SimpleNamespace(template="qwen", model_name_or_path="m"), mm=None)
    with pytest.raises(ConfigError) as err:
        check_kinds(text_only, {"audios": "messages[0].content[1]"})
    english = str(err.value)
    assert english.startswith(
        "messages[0].content[1]: this model (template 'qwen') is text only and cannot read audio: use a "
        "vision-language model with its multimodal template ("
    )
    assert english.endswith(" for audio), or remove the audio.")
    zh = say_error(err.value, "zh")
    assert zh.startswith("messages[0].content[1]：该模型（模板 'qwen'）只能处理文本，无法读取音频：请使用视觉语言模型")
    assert zh.endswith("），或删除音频。")
    assert untranslated(zh, ALLOWED | value_words(err.value.problems[0].message)) == [], zh

    vision = SimpleNamespace(cfg=text_only.cfg, mm=SimpleNamespace(MEDIA=("images", "videos"), NAME="qwen2_vl"))
    with pytest.raises(ConfigError) as err:
        check_kinds(vision, {"audios": "messages[0].content[0]"})
    said_in_both(
        err.value,
        "messages[0].content[0]: the qwen2_vl family reads images and videos only, not audio. Remove the audio, or "
        "serve a model of a family that reads audio.",
        "messages[0].content[0]：qwen2_vl 系列只能读取图片和视频，不能读取音频。请删除该音频，或使用能读取音频的"
        "模型系列。",
    )


def test_image_placeholders_that_do_not_match(engine):
    """A data error keyed the same way (its message is a Said, no problems)."""
    from tunekit.config.problems import Said

    exc = DataError(Said("infer_image_placeholders", placed=2, given=1))
    said_in_both(
        exc,
        "chat: 2 <image> placeholder(s) in the messages but 1 image(s) given.",
        "对话：消息中有 2 个 `<image>` 占位符，但给出了 1 张图片。",
    )
