"""The `jinja` mode (the tokenizer's own chat_template) and fix_tokenizer, on small local tokenizers."""

from __future__ import annotations

import json

import pytest

from tests.helpers import CHAT_TEMPLATES
from tunekit.data.templates import get_template
from tunekit.errors import ConfigError

transformers = pytest.importorskip("transformers")
from tokenizers import Tokenizer, models, pre_tokenizers, processors  # noqa: E402

FIXTURES = CHAT_TEMPLATES
WORDS = ["hi", "hello", "how", "are", "you", "fine", "a", "b"]


def tiny_tokenizer(
    special: list[str], bos: str | None = None, eos: str | None = None, add_bos: bool = False, chat_template=None
):
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}
    for tok in special:
        vocab.setdefault(tok, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    if add_bos:
        backend.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, vocab[bos])])
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", bos_token=bos, eos_token=eos
    )
    tok.add_special_tokens({"extra_special_tokens": [s for s in special if s not in (bos, eos)]})
    if chat_template:
        tok.chat_template = chat_template
    return tok


QWEN_SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
CONV = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"},
    {"role": "user", "content": "how are you"},
    {"role": "assistant", "content": "fine"},
]


def test_jinja_mode_finds_the_same_spans_as_the_named_template():
    tok = tiny_tokenizer(QWEN_SPECIAL, eos="<|im_end|>", chat_template=(FIXTURES / "qwen.jinja").read_text())
    jinja = get_template("jinja", tok)
    named = get_template("qwen", tok)
    assert jinja.encode_turns(CONV, system="S") == named.encode_turns(CONV, system="S")
    assert jinja.encode_turns(CONV) == named.encode_turns(CONV)  # default system comes from the template
    assert jinja.render_prompt(CONV[:3]) == named.render_prompt(CONV[:3])
    assert jinja.stop_words == ["<|im_end|>"]
    assert jinja.chat_template_jinja() == tok.chat_template


def test_jinja_mode_llama3_spans():
    special = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok = tiny_tokenizer(
        special, bos="<|begin_of_text|>", eos="<|eot_id|>", chat_template=(FIXTURES / "llama3.jinja").read_text()
    )
    assert get_template("jinja", tok).encode_turns(CONV, system="S") == get_template("llama3", tok).encode_turns(
        CONV, system="S"
    )


def test_jinja_mode_appends_eos_when_the_template_has_no_end_marker():
    tok = tiny_tokenizer(
        ["<|user|>", "<|assistant|>", "<|system|>", "[gMASK]", "<sop>", "<|endoftext|>"],
        eos="<|endoftext|>",
        chat_template=(FIXTURES / "glm4.jinja").read_text(),
    )
    turns = get_template("jinja", tok).encode_turns(CONV)
    assert turns == [
        ("[gMASK]<sop><|user|>\nhi<|assistant|>", "\nhello"),
        ("<|user|>\nhow are you<|assistant|>", "\nfine<|endoftext|>"),
    ]


def test_jinja_mode_rejects_history_rewriting_templates():
    tok = tiny_tokenizer(QWEN_SPECIAL, eos="<|im_end|>", chat_template=(FIXTURES / "qwen3.jinja").read_text())
    tpl = get_template("jinja", tok)
    # single turn works: the empty <think> block the template adds is part of the reply
    assert tpl.encode_turns(CONV[:2]) == [
        ("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<think>\n\n</think>\n\nhello<|im_end|>")
    ]
    with pytest.raises(ConfigError, match="not prefix-preserving: adding turn 2.*Qwen3 drops the <think>.*qwen3"):
        tpl.encode_turns(CONV)


def test_jinja_mode_tools():
    tok = tiny_tokenizer(QWEN_SPECIAL, eos="<|im_end|>", chat_template=(FIXTURES / "qwen.jinja").read_text())
    tools = json.dumps([{"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}])
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "function_call", "content": json.dumps({"name": "f", "arguments": {"x": 1}})},
        {"role": "observation", "content": "b"},
        {"role": "assistant", "content": "done"},
    ]
    assert get_template("jinja", tok).encode_turns(msgs, tools=tools) == get_template("qwen", tok).encode_turns(
        msgs, tools=tools
    )


def test_fix_tokenizer_replaces_eos_and_adds_pad():
    tok = tiny_tokenizer(QWEN_SPECIAL, eos="<|endoftext|>")  # a Qwen base tokenizer: eos <|endoftext|>, no pad
    n_vocab = len(tok)
    get_template("qwen", tok).fix_tokenizer(tok)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|im_end|>"
    assert len(tok) == n_vocab  # nothing new: <|im_end|> was already a token


def test_fix_tokenizer_registers_stop_words():
    tok = tiny_tokenizer(["</s>"], eos="</s>")
    get_template("glm4", tok).fix_tokenizer(tok)
    assert tok.eos_token == "</s>" and tok.pad_token == "</s>"
    assert tok.convert_tokens_to_ids("<|user|>") != tok.unk_token_id  # added (the model must be resized)
    assert tok.tokenize("hi<|user|>") == ["hi", "<|user|>"]


def test_bos_from_the_tokenizer():
    tok = tiny_tokenizer(["<s>", "</s>"], bos="<s>", eos="</s>", add_bos=True)
    assert get_template("empty", tok).render(CONV[:2]) == "<s>hihello</s>"
    no_bos = tiny_tokenizer(["<s>", "</s>"], bos="<s>", eos="</s>", add_bos=False)
    assert get_template("empty", no_bos).render(CONV[:2]) == "hihello</s>"
    assert get_template("mistral", no_bos).render(CONV[:2]) == "<s>[INST] hi[/INST] hello</s>"  # official: always BOS
