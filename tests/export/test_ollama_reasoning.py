"""The Ollama Modelfile's TEMPLATE of the reasoning templates, rendered with Go's template semantics
(tests/go_template.py) for a two-turn conversation, equals the official chat template's text (the vendored
``official_<name>.jinja`` rendered by transformers) and tunekit's generation prompt; the Modelfile's stops."""

from __future__ import annotations

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from tests.go_template import go_render
from tunekit.data.templates import get_template, harmony
from tunekit.data.templates.jinja_export import official_jinja
from tunekit.export.ollama import go_template, modelfile_text

DAY = "2025-08-05"
CONVERSATION = [
    {"role": "user", "content": "What is 2 plus 2?"},
    {"role": "assistant", "content": "It is 4."},
    {"role": "user", "content": "And 3 plus 3?"},
]
SPECIAL = {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}


def official(name: str, messages: list[dict], **kwargs) -> str:
    jinja = official_jinja(name)
    return render_jinja_template([messages], chat_template=jinja, add_generation_prompt=True, **SPECIAL, **kwargs)[0][
        0
    ]


@pytest.fixture(autouse=True)
def fixed_day(monkeypatch):
    import datetime

    import transformers.utils.chat_template_utils as chat_utils

    class Fixed(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.datetime(2025, 8, 5, 12, 0)

    monkeypatch.setattr(chat_utils, "datetime", Fixed)  # the official template's strftime_now
    monkeypatch.setattr(harmony, "today", lambda: DAY)


@pytest.mark.parametrize("name", ["deepseekr1", "gpt_oss"])
@pytest.mark.parametrize("system", [None, "Be terse."])
def test_modelfile_template_renders_the_official_prompt(name, system):
    template = get_template(name)
    messages = ([{"role": "system", "content": system}] if system else []) + CONVERSATION
    rendered = go_render(go_template(template), system or "", messages, date=DAY)
    assert rendered == official(name, messages) == template.render_prompt(CONVERSATION, system)
    if name == "deepseekr1":
        assert rendered.endswith("<｜Assistant｜><think>\n")  # the prompt opens the thought
    else:
        assert rendered.endswith("<|start|>user<|message|>And 3 plus 3?<|end|><|start|>assistant")


@pytest.mark.parametrize("name", ["deepseekr1", "gpt_oss", "qwen3"])
def test_thinking_off_puts_the_empty_thought_in_the_prompt(name):
    template = get_template(name)
    rendered = go_render(go_template(template, enable_thinking=False), "", CONVERSATION, date=DAY)
    assert rendered == template.render_prompt(CONVERSATION, None, enable_thinking=False)
    if name == "qwen3":  # the only one of the three whose official template has an enable_thinking switch
        assert rendered == official(name, CONVERSATION, enable_thinking=False)


def test_gpt_oss_modelfile_stops_and_notes(tmp_path):
    from transformers import AutoTokenizer

    from tunekit.tiny.text import build_tiny_model

    folder = build_tiny_model(tmp_path / "model", like="gpt-oss-20b", num_layers=1)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    text = modelfile_text("model.gguf", get_template("gpt_oss", tokenizer), tokenizer, None)
    stops = [line for line in text.splitlines() if line.startswith("PARAMETER stop")]
    assert stops == ['PARAMETER stop "<|return|>"', 'PARAMETER stop "<|call|>"']
    assert "{{ currentDate }}" in text and "# note: harmony: the date is Ollama's currentDate" in text
