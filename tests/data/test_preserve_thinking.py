"""``preserve_thinking`` (LLaMA-Factory 0.9.5+) on the qwen3 template: earlier replies that are not trained keep their
thought block.

The reference is the official Qwen3-8B template (``tests/fixtures/chat_templates/qwen3.jinja``) with the history gate
of Qwen3.6's official template, which adds ``preserve_thinking``: an assistant reply renders its
``<think>\\n...\\n</think>\\n\\n`` block when ``(preserve_thinking is defined and preserve_thinking is true) or
loop.index0 > ns.last_query_index``, the empty block for a reply without a thought. With ``preserve_thinking`` false
the patched template renders exactly as the official Qwen3 template.

LLaMA-Factory's rules (``ReasoningTemplate``, ``SupervisedDatasetProcessor``): sft drops history thoughts only with
``mask_history`` and without ``preserve_thinking``; ``enable_thinking: false`` removes every thought first (history
replies then carry the empty block); the pairwise, feedback and prompt-only stages drop history thoughts unless
``preserve_thinking``.
"""

from __future__ import annotations

import pytest

from tests.helpers import CHAT_TEMPLATES, prepare_jsonl
from tunekit.config import load_config
from tunekit.errors import ConfigError

IGNORE = -100
QWEN3 = (CHAT_TEMPLATES / "qwen3.jinja").read_text(encoding="utf-8")
EMPTY = "<think>\n\n</think>\n\n"


def _with_preserve_gate(official: str) -> str:
    """The official Qwen3 template with Qwen3.6's ``preserve_thinking`` gate on the history thoughts."""
    gate = "{%- if loop.index0 > ns.last_query_index %}"
    inner = "{%- if loop.last or (not loop.last and reasoning_content) %}"
    preserve = "(preserve_thinking is defined and preserve_thinking is true)"
    assert official.count(gate) == 1 and official.count(inner) == 1
    return official.replace(gate, "{%- if " + preserve + " or loop.index0 > ns.last_query_index %}").replace(
        inner, "{%- if " + preserve + " or loop.last or (not loop.last and reasoning_content) %}"
    )


PRESERVING = _with_preserve_gate(QWEN3)

U = lambda c: {"role": "user", "content": c}  # noqa: E731
A = lambda c: {"role": "assistant", "content": c}  # noqa: E731

TWO_TURNS = [
    U("What is 2+2?"),
    A("<think>\nAdd.\n</think>\n\n4"),
    U("And times 3?"),
    A("<think>\nMultiply 4 by 3.\n</think>\n\n12"),
]
FIRST_WITHOUT_THOUGHT = [U("What is 2+2?"), A("4"), U("And times 3?"), A("<think>\nMultiply 4 by 3.\n</think>\n\n12")]


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    from tunekit.tiny.text import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3") / "model", like="qwen3", seed=0)


@pytest.fixture(scope="module")
def tok(tiny_qwen3):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_qwen3)


def _prepare(model, tmp_path, records, stage="sft", **opts):
    return prepare_jsonl(model, tmp_path, records, stage, name="think", **{"template": "qwen3", **opts})[0]


def _official(tok, messages, *, generation: bool, thinking: bool = True, preserve: bool = False) -> list[int]:
    kwargs = {"preserve_thinking": True} if preserve else {}
    return tok.apply_chat_template(
        messages,
        chat_template=PRESERVING,
        tokenize=True,
        return_dict=True,
        add_generation_prompt=generation,
        enable_thinking=thinking,
        **kwargs,
    )["input_ids"]


def _last_reply_row(tok, messages, *, thinking: bool = True, preserve: bool = False):
    """(ids, labels) of a row training the last reply: the generation prompt of the messages before it untrained, the
    rest of the official rendering (without its final newline) trained."""
    ids = _official(tok, messages, generation=False, thinking=thinking, preserve=preserve)
    assert tok.decode(ids[-2:]) == "<|im_end|>\n"
    ids = ids[:-1]
    prompt = _official(tok, messages[:-1], generation=True, thinking=thinking, preserve=preserve)
    assert ids[: len(prompt)] == prompt
    return ids, [IGNORE] * len(prompt) + ids[len(prompt) :]


def _without_thought(messages):
    return [
        A(m["content"].rsplit("</think>", 1)[-1].lstrip("\n")) if m["role"] == "assistant" else m for m in messages
    ]


def test_the_patched_reference_is_the_official_template_without_preserve_thinking(tok):
    """The gate changes nothing unless preserve_thinking is passed: off, the reference is the official Qwen3 one."""
    for messages in (TWO_TURNS, FIRST_WITHOUT_THOUGHT):
        for generation, msgs in ((False, messages), (True, messages[:3])):
            official = tok.apply_chat_template(
                msgs, chat_template=QWEN3, tokenize=False, add_generation_prompt=generation
            )
            assert (
                tok.apply_chat_template(
                    msgs, chat_template=PRESERVING, tokenize=False, add_generation_prompt=generation
                )
                == official
            )


@pytest.mark.parametrize("preserve", [False, True])
def test_mask_history_row_with_and_without_preserve_thinking(tiny_qwen3, tok, tmp_path, preserve):
    """Two turns, a thought in both replies, only the last trained: turn 1 keeps its thought with preserve_thinking
    (untrained, in the prompt), loses it without (the official Qwen3 history); the last reply is trained whole."""
    data = _prepare(tiny_qwen3, tmp_path, [{"messages": TWO_TURNS}], mask_history=True, preserve_thinking=preserve)
    (row,) = data.train
    ids, labels = _last_reply_row(tok, TWO_TURNS, preserve=preserve)
    assert (row["input_ids"], row["labels"]) == (ids, labels)
    text = tok.decode(row["input_ids"])
    first = "<|im_start|>assistant\n" + ("<think>\nAdd.\n</think>\n\n" if preserve else "") + "4<|im_end|>"
    assert first in text
    trained = tok.decode([i for i, label in zip(row["input_ids"], row["labels"]) if label != IGNORE])
    assert trained == "<think>\nMultiply 4 by 3.\n</think>\n\n12<|im_end|>"


def test_preserve_thinking_gives_a_history_reply_without_a_thought_the_empty_block(tiny_qwen3, tok, tmp_path):
    """As LLaMA-Factory's sft adds the empty thought to every turn it keeps thoughts for, and Qwen3.6's template
    renders ``<think>\\n\\n</think>\\n\\n`` for a history reply with an empty reasoning."""
    data = _prepare(
        tiny_qwen3, tmp_path, [{"messages": FIRST_WITHOUT_THOUGHT}], mask_history=True, preserve_thinking=True
    )
    (row,) = data.train
    assert (row["input_ids"], row["labels"]) == _last_reply_row(tok, FIRST_WITHOUT_THOUGHT, preserve=True)
    assert "<|im_start|>assistant\n" + EMPTY + "4<|im_end|>" in tok.decode(row["input_ids"])


def test_enable_thinking_false_removes_every_thought_and_history_keeps_the_empty_block(tiny_qwen3, tok, tmp_path):
    """LLaMA-Factory removes all thoughts first; with preserve_thinking each turn then gets the empty block in its
    prompt (history included), which is Qwen3.6's rendering of thought-less history with preserve_thinking."""
    data = _prepare(
        tiny_qwen3,
        tmp_path,
        [{"messages": TWO_TURNS}],
        mask_history=True,
        preserve_thinking=True,
        enable_thinking=False,
    )
    (row,) = data.train
    expected = _last_reply_row(tok, _without_thought(TWO_TURNS), thinking=False, preserve=True)
    assert (row["input_ids"], row["labels"]) == expected
    text = tok.decode(row["input_ids"])
    assert "Add." not in text and "Multiply" not in text
    assert text.count(EMPTY) == 2


@pytest.mark.parametrize("messages", [TWO_TURNS, FIRST_WITHOUT_THOUGHT])
def test_every_reply_trained_is_unchanged_by_preserve_thinking(tiny_qwen3, tmp_path, messages):
    """sft without mask_history trains every reply with its thought already: preserve_thinking changes nothing."""
    rows = []
    for preserve in (False, True):
        data = _prepare(tiny_qwen3, tmp_path / str(preserve), [{"messages": messages}], preserve_thinking=preserve)
        (row,) = data.train
        rows.append((row["input_ids"], row["labels"]))
    assert rows[0] == rows[1]


def test_dpo_prompt_keeps_the_history_thought(tiny_qwen3, tok, tmp_path):
    """The pairwise stages train the last reply only: with preserve_thinking the shared history keeps turn 1's thought
    (LLaMA-Factory's encode_oneturn), each side equals the reference rendering."""
    chosen, rejected = TWO_TURNS[3], A("<think>\nGuess.\n</think>\n\n7")
    record = {"chosen_messages": TWO_TURNS[:3] + [chosen], "rejected_messages": TWO_TURNS[:3] + [rejected]}
    for preserve in (False, True):
        data = _prepare(tiny_qwen3, tmp_path / str(preserve), [record], stage="dpo", preserve_thinking=preserve)
        (row,) = data.train
        for side, reply in (("chosen", chosen), ("rejected", rejected)):
            ids, labels = _last_reply_row(tok, TWO_TURNS[:3] + [reply], preserve=preserve)
            assert (row[f"{side}_input_ids"], row[f"{side}_labels"]) == (ids, labels), (side, preserve)
            assert ("Add." in tok.decode(ids)) is preserve


@pytest.mark.parametrize("thinking", [True, False])
def test_prompt_only_stages_render_the_history_thought(tok, thinking):
    """ppo / grpo prompts (Template.render_prompt with preserve_thinking, data/processors/prompt.py)."""
    from tunekit.data.templates import get_template

    tpl = get_template("qwen3", tok)
    messages = TWO_TURNS[:3] if thinking else _without_thought(TWO_TURNS[:3])
    for preserve in (False, True):
        text = tpl.render_prompt(TWO_TURNS[:3], enable_thinking=thinking, preserve_thinking=preserve)
        expected = _official(tok, messages, generation=True, thinking=thinking, preserve=preserve)
        assert tok(text, add_special_tokens=False)["input_ids"] == expected, preserve


def test_ppo_rows_hold_the_preserved_prompt(tiny_qwen3, tok, tmp_path):
    data = _prepare(tiny_qwen3, tmp_path, [{"messages": TWO_TURNS}], stage="ppo", preserve_thinking=True)
    (row,) = data.train
    assert row["input_ids"] == _official(tok, TWO_TURNS[:3], generation=True, preserve=True)


@pytest.mark.parametrize("template", ["qwen", "qwen3_nothink"])
def test_preserve_thinking_needs_a_reasoning_template(tiny_qwen3, tmp_path, template):
    with pytest.raises(ConfigError) as err:
        _prepare(tiny_qwen3, tmp_path, [{"messages": TWO_TURNS}], template=template, preserve_thinking=True)
    assert str(err.value) == (
        "preserve_thinking needs a reasoning template with thought markers (qwen3, qwen3_vl, deepseekr1, gpt_oss), "
        f"but template is {template}: it drops no thought from earlier replies; use your reasoning model's template, "
        "or remove preserve_thinking."
    )


def test_preserve_thinking_is_an_option_and_changes_the_dataset_cache_key():
    from tunekit.config import build_config
    from tunekit.config.llamafactory_options import unsupported
    from tunekit.config.schema import Config
    from tunekit.data.cache import tokenization_options

    assert "preserve_thinking" not in unsupported(Config.model_fields)
    on, off = build_config({"preserve_thinking": True}), build_config({})
    assert (on.preserve_thinking, off.preserve_thinking) == (True, False)
    assert tokenization_options(on) != tokenization_options(off)


def test_jinja_mode_passes_preserve_thinking_to_the_chat_template(tiny_qwen3):
    """template: jinja with a chat template that reads preserve_thinking (Qwen3.5/3.6 do): with it the template keeps
    every earlier thought and is prefix-preserving, so the turns are found; without it the official Qwen3 history
    drops turn 1's thought and jinja mode refuses the template."""
    from transformers import AutoTokenizer

    from tunekit.data.templates import get_template

    tok = AutoTokenizer.from_pretrained(tiny_qwen3)
    tok.chat_template = PRESERVING
    tpl = get_template("jinja", tok)
    turns = tpl.encode_turns(TWO_TURNS, preserve_thinking=True)
    whole = tok.apply_chat_template(TWO_TURNS, tokenize=False, preserve_thinking=True)
    assert "".join(p + r for p, r in turns) == whole.rstrip("\n")
    assert turns[0][1] == "<think>\nAdd.\n</think>\n\n4<|im_end|>"
    assert tpl.render_prompt(TWO_TURNS[:3], preserve_thinking=True) == tok.apply_chat_template(
        TWO_TURNS[:3], tokenize=False, add_generation_prompt=True, preserve_thinking=True
    )
    with pytest.raises(ConfigError, match="not prefix-preserving"):
        tpl.encode_turns(TWO_TURNS)


@pytest.mark.parametrize("parse_special_tokens", [True, False])
def test_chat_renders_history_thoughts_as_training_did(tiny_qwen3, parse_special_tokens):
    """tunekit chat / api / predict (ChatEngine.render, both the trusted and the API's untrusted path) keep earlier
    replies' thoughts exactly when the run trained with preserve_thinking, as the official template gated by
    preserve_thinking renders the generation prompt."""
    from jinja2 import Environment

    from tunekit.infer.engine import ChatEngine

    history = TWO_TURNS[:3]
    for preserve in (True, False):
        cfg = load_config(None, dict(model_name_or_path=str(tiny_qwen3), template="qwen3", preserve_thinking=preserve))
        engine = ChatEngine(cfg)
        ids = engine.render(history, parse_special_tokens=parse_special_tokens)
        reference = (
            Environment()
            .from_string(PRESERVING)
            .render(messages=history, add_generation_prompt=True, preserve_thinking=preserve)
        )
        assert engine.tokenizer.decode(ids) == reference
        assert ("<think>\nAdd.\n</think>" in reference) is preserve
