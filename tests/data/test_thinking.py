"""``enable_thinking`` and ``thought_loss_weight`` on the qwen3 template, pinned against the official Qwen3 template.

Every row is tokenized by the real pipeline (a tiny Qwen3 model folder: its BPE tokenizer with ``<think>`` and
``</think>`` as added tokens) and compared with ``tokenizer.apply_chat_template`` on the official Qwen3-8B template
(``tests/fixtures/chat_templates/qwen3.jinja``):

* the row's ids are the official rendering of the conversation (its last newline, which opens the next turn, is not
  part of a training row);
* its prompt (every label -100) is the official *generation prompt* of the messages before the reply, with the same
  ``enable_thinking``: what the model sees at inference; the rest is trained.

LLaMA-Factory's ``ReasoningTemplate`` semantics (v0.9): ``enable_thinking: true`` trains the reply's thought, and a
reply without one gets an empty ``<think>\\n\\n</think>\\n\\n`` block that is trained; ``enable_thinking: false``
removes every thought and puts the empty block in the prompt (not trained), where the official template's
``enable_thinking=False`` generation prompt has it.
"""

from __future__ import annotations

import pytest

from tests.helpers import CHAT_TEMPLATES, write_dataset
from tunekit.config import load_config
from tunekit.data.pipeline import prepare_datasets
from tunekit.errors import ConfigError

IGNORE = -100
OFFICIAL = (CHAT_TEMPLATES / "qwen3.jinja").read_text(encoding="utf-8")
THOUGHT = "<think>\nAdd the two numbers.\n</think>\n\n"
EMPTY = "<think>\n\n</think>\n\n"

U = lambda c: {"role": "user", "content": c}  # noqa: E731
A = lambda c: {"role": "assistant", "content": c}  # noqa: E731

WITH_THOUGHT = [U("What is 2+2?"), A(THOUGHT + "4")]
WITHOUT_THOUGHT = [U("What is 3+3?"), A("6")]
TWO_TURNS = [
    U("What is 2+2?"),
    A("<think>\nAdd.\n</think>\n\n4"),
    U("And times 3?"),
    A("<think>\nMultiply 4 by 3.\n</think>\n\n12"),
]


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    from tunekit.tiny.text import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3") / "model", like="qwen3", seed=0)


def _prepare(model, tmp_path, conversations, **opts):
    from tunekit.model.loader import load_tokenizer

    folder = tmp_path / "data"
    write_dataset(folder, "think", [{"messages": m} for m in conversations], {"formatting": "openai"}, ".jsonl")
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(model),
            "dataset": "think",
            "dataset_dir": str(folder),
            "output_dir": str(tmp_path / "out"),
            "stage": "sft",
            "template": "qwen3",
            "cutoff_len": 1024,
            **opts,
        },
    )
    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok), tok


def _official(tok, messages, *, generation: bool, thinking: bool = True) -> list[int]:
    return tok.apply_chat_template(
        messages,
        chat_template=OFFICIAL,
        tokenize=True,
        return_dict=True,
        add_generation_prompt=generation,
        enable_thinking=thinking,
    )["input_ids"]


def _conversation(tok, messages, thinking: bool = True) -> list[int]:
    """The official ids of a whole conversation, without the newline after its last ``<|im_end|>``."""
    ids = _official(tok, messages, generation=False, thinking=thinking)
    assert tok.decode(ids[-2:]) == "<|im_end|>\n"
    return ids[:-1]


def _without_thought(messages):
    return [
        A(m["content"].rsplit("</think>", 1)[-1].lstrip("\n")) if m["role"] == "assistant" else m for m in messages
    ]


def _labels_of_last_reply(tok, messages, thinking: bool):
    """(ids, labels) the official template implies for training the last reply: the generation prompt of the messages
    before it (with ``thinking``) untrained, the rest trained."""
    ids = _conversation(tok, messages, thinking)
    prompt = _official(tok, messages[:-1], generation=True, thinking=thinking)
    assert ids[: len(prompt)] == prompt
    return ids, [IGNORE] * len(prompt) + ids[len(prompt) :]


def _trained(tok, ids, labels) -> list[str]:
    """The decoded runs of trained tokens (each label equal to its id)."""
    runs, run = [], []
    for i, label in zip(ids, labels):
        if label != IGNORE:
            assert label == i
            run.append(i)
        elif run:
            runs, run = runs + [tok.decode(run)], []
    return runs + ([tok.decode(run)] if run else [])


def test_thought_markers_are_single_tokens(tiny_qwen3):
    """The tiny tokenizer writes <think> / </think> as one token each, as Qwen3's does: the masks below split there."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_qwen3)
    assert len(tok("<think>", add_special_tokens=False)["input_ids"]) == 1
    assert len(tok("</think>", add_special_tokens=False)["input_ids"]) == 1


@pytest.mark.parametrize("thinking", [True, False])
def test_enable_thinking_ids_and_labels_equal_the_official_template(tiny_qwen3, tmp_path, thinking):
    data, tok = _prepare(tiny_qwen3, tmp_path, [WITH_THOUGHT, WITHOUT_THOUGHT], enable_thinking=thinking)
    rows = list(data.train)
    for row, messages in zip(rows, [WITH_THOUGHT, WITHOUT_THOUGHT]):
        # thinking off: LLaMA-Factory removes the thought; the official rendering is that of the thought-less reply
        ids, labels = _labels_of_last_reply(tok, messages if thinking else _without_thought(messages), thinking)
        assert row["input_ids"] == ids
        assert row["labels"] == labels
    with_thought, without = (_trained(tok, r["input_ids"], r["labels"]) for r in rows)
    if thinking:  # the thought is trained; a reply without one trains the empty block (LLaMA-Factory: "compute loss")
        assert (with_thought, without) == ([THOUGHT + "4<|im_end|>"], [EMPTY + "6<|im_end|>"])
    else:  # the empty block is prompt, as the official enable_thinking=False generation prompt ends with it
        assert (with_thought, without) == (["4<|im_end|>"], ["6<|im_end|>"])
        assert tok.decode(rows[0]["input_ids"]).endswith("assistant\n" + EMPTY + "4<|im_end|>")


@pytest.mark.parametrize("thinking", [True, False])
def test_inference_prompt_equals_the_official_generation_prompt(tiny_qwen3, thinking):
    """What chat / the API / predict tokenize (infer/engine.py: render_prompt, or encode_untrusted for the API) for a
    second turn: the official generation prompt, turn 1 without its thought, the empty block when thinking is off."""
    from transformers import AutoTokenizer

    from tunekit.data.templates import get_template
    from tunekit.infer.untrusted import encode_untrusted

    tok = AutoTokenizer.from_pretrained(tiny_qwen3)
    tpl = get_template("qwen3", tok)
    messages = TWO_TURNS[:3]
    expected = _official(tok, messages, generation=True, thinking=thinking)
    text = tpl.render_prompt(messages, enable_thinking=thinking)
    assert tok(text, add_special_tokens=False)["input_ids"] == expected
    assert encode_untrusted(tpl, tok, messages, None, None, thinking) == expected
    assert "Add." not in text and text.endswith("assistant\n" + ("" if thinking else EMPTY))


def test_thought_loss_off_masks_the_thought_block_only(tiny_qwen3, tmp_path):
    data, tok = _prepare(tiny_qwen3, tmp_path, [WITH_THOUGHT, WITHOUT_THOUGHT], thought_loss_weight=0)
    for row, messages, thought in zip(data.train, [WITH_THOUGHT, WITHOUT_THOUGHT], [THOUGHT, EMPTY]):
        ids, _ = _labels_of_last_reply(tok, messages, thinking=True)
        assert row["input_ids"] == ids  # the thought stays in the input
        prompt = _official(tok, messages[:-1], generation=True)
        head = tok(tok.decode(prompt) + thought, add_special_tokens=False)["input_ids"]
        assert ids[: len(head)] == head
        assert row["labels"] == [IGNORE] * len(head) + ids[len(head) :]  # the answer and <|im_end|> are trained
        assert tok.decode(ids[len(prompt) : len(head)]) == thought
    assert [_trained(tok, r["input_ids"], r["labels"]) for r in data.train] == [["4<|im_end|>"], ["6<|im_end|>"]]


def test_two_turns_mask_history_is_what_inference_sees(tiny_qwen3, tmp_path):
    """The official template drops the thought of a reply before the last user message: trained on the last reply only
    (mask_history), the row is the official rendering, so its prompt is exactly the inference prompt of turn 2."""
    data, tok = _prepare(tiny_qwen3, tmp_path, [TWO_TURNS], mask_history=True)
    (row,) = data.train
    ids, labels = _labels_of_last_reply(tok, TWO_TURNS, thinking=True)
    assert (row["input_ids"], row["labels"]) == (ids, labels)
    text = tok.decode(row["input_ids"])
    assert "Add." not in text and "<|im_start|>assistant\n4<|im_end|>" in text  # turn 1 as history: no thought
    assert _trained(tok, row["input_ids"], row["labels"]) == ["<think>\nMultiply 4 by 3.\n</think>\n\n12<|im_end|>"]


@pytest.mark.parametrize("weight", [1, 0])
def test_two_turns_every_reply_trained_keeps_each_thought(tiny_qwen3, tmp_path, weight):
    """Every reply trained (the default): each reply is trained as the model must produce it, thought included, so
    turn 1's thought stays in the row (LLaMA-Factory's rendering); turn 1 is the official generation of turn 1 and
    turn 2's prompt differs from the inference prompt only by that thought (mask_history gives the exact one)."""
    data, tok = _prepare(tiny_qwen3, tmp_path, [TWO_TURNS], thought_loss_weight=weight)
    (row,) = data.train
    first = _conversation(tok, TWO_TURNS[:2])  # turn 1 as the official template renders it when it is the last reply
    second = "\n<|im_start|>user\nAnd times 3?<|im_end|>\n<|im_start|>assistant\n" + TWO_TURNS[3]["content"]
    assert row["input_ids"] == first + tok(second + "<|im_end|>", add_special_tokens=False)["input_ids"]
    thoughts = ["<think>\nAdd.\n</think>\n\n4<|im_end|>", "<think>\nMultiply 4 by 3.\n</think>\n\n12<|im_end|>"]
    answers = ["4<|im_end|>", "12<|im_end|>"]
    assert _trained(tok, row["input_ids"], row["labels"]) == (thoughts if weight == 1 else answers)


@pytest.mark.parametrize("template, weight", [("qwen", 0), ("qwen3_nothink", 0.5), ("jinja", 0)])
def test_thought_loss_weight_needs_thought_markers(tiny_qwen3, tmp_path, template, weight):
    with pytest.raises(ConfigError) as err:
        _prepare(tiny_qwen3, tmp_path, [WITH_THOUGHT], template=template, thought_loss_weight=weight)
    assert str(err.value) == (
        f"thought_loss_weight {weight} needs a reasoning template with thought markers (qwen3, qwen3_vl, "
        f"deepseekr1, gpt_oss), but template is {template}: it has no thought block to weight; use your reasoning "
        "model's template, or remove thought_loss_weight."
    )


@pytest.mark.parametrize("stage", ["dpo", "kto", "rm", "pt"])
def test_thought_loss_weight_is_refused_outside_sft(stage):
    from tunekit.config import build_config

    with pytest.raises(ConfigError) as err:
        build_config({"stage": stage, "thought_loss_weight": 0.5})
    assert (
        f"thought_loss_weight 0.5 is for stage sft (stage is {stage}): {stage} scores or rewards each reply whole, "
        "thought included; remove thought_loss_weight."
    ) in str(err.value)


def test_thought_loss_weight_needs_enable_thinking():
    from tunekit.config import build_config

    with pytest.raises(ConfigError) as err:
        build_config({"thought_loss_weight": 0, "enable_thinking": False})
    assert (
        "thought_loss_weight 0 with enable_thinking: false: no thought is trained (thoughts are removed and the empty "
        "<think></think> block is part of the prompt); remove thought_loss_weight or set enable_thinking: true."
    ) in str(err.value)
