"""The Chinese board: every visible string of the forms (labels, help lines, group and section titles, choices'
words) is Chinese, apart from option names, values, paths and the names of tools and methods (LoRA, DeepSpeed).

A string is split into words; a word passes when it is an option name or value, code (set in backticks, or with
``_ . / :`` or a digit in it: a file, a preset, a variable), a single letter (r, N: a formula's variable), or one of
:data:`TERMS`. Everything else is English a Chinese reader was not given in Chinese."""

from __future__ import annotations

import re

import pytest

from tunekit.config import iter_fields
from tunekit.webui.fields import field_specs

gr = pytest.importorskip("gradio")

# Names of tools, models, methods and units, written the same in Chinese text (LLaMA Board's Chinese keeps them).
_TERMS = """
LoRA LoRA+ QLoRA DoRA rsLoRA PiSSA OFT GaLore APOLLO APOLLO-Mini BAdam Adam AdamW Adam-mini Muon LLaMA Pro
SFT RLHF PPO DPO cDPO KTO GRPO SimPO GAE KL DFT EAFT ASFT ZeRO DeepSpeed FSDP DDP RoPE FP8 TF32 Float8Linear
GPU CPU API URL ID JSON MB GB Hz EOS LM MLP SVD SwiGLU RMSNorm FlashAttention-2 Liger Unsloth SwanLab tunekit
LLaMA-Factory Hugging Face Qwen-VL Qwen2-VL NVIDIA Hopper Ampere Transformer Engine Rust Ziegler Wu Retry-After
transformers accelerate bitsandbytes liger-kernel flash-attn galore-torch apollo-torch adam-mini unsloth optimum
gptqmodel GPTQ safetensors pickle base64 Top-k Top-p token rollout dropout logits logit alpha Beta beta epsilon
lambda merger all-gather ftx
"""

TERMS = set(_TERMS.split())
WORD = re.compile(r"[A-Za-z][A-Za-z0-9+\-_.:/]*[A-Za-z0-9+]|[A-Za-z]")
CODE = re.compile(r"`[^`]*`|\[默认: [^\]]*\]")  # code, and a default (a value)


def _allowed_values() -> set[str]:
    values = {"true", "false", "null", "auto", "all"}
    for spec in field_specs():
        values.update(str(c) for c in spec.choices)
    values.update(("pt", "sft", "rm", "ppo", "dpo", "kto", "grpo", "lora", "oft", "freeze", "full"))
    return values


def untranslated(text: str, allowed: set[str]) -> list[str]:
    words = []
    for found in WORD.findall(CODE.sub(" ", text or "")):
        word = found.rstrip(".:-")
        if len(word) <= 1 or word in allowed or word in TERMS or re.search(r"[_./:0-9]", word):
            continue
        words.append(word)
    return words


def _form_strings(demo) -> list[tuple[str, str]]:
    """(where, text) of every string a form shows: titles, labels, help lines, choices' words."""
    out = []
    for tab, form in demo.tk_forms.items():
        for acc, name, _specs in form.accordions:
            out.append((f"{tab}: section {name}", acc.label))
        if form.advanced is not None:
            out.append((f"{tab}: advanced", form.advanced.label))
        for name, widget in form.comps.items():
            out.append((f"{tab}: {name} label", widget.label))
            out.append((f"{tab}: {name} help", widget.info))
            for shown, value in getattr(widget, "choices", None) or []:
                if shown != value:
                    out.append((f"{tab}: {name} choice {value!r}", shown))
    return out


@pytest.fixture(scope="module")
def zh_board():
    from tunekit.webui.app import create_app

    return create_app(lang="zh")


def test_the_chinese_forms_show_no_untranslated_english(zh_board):
    allowed = {name for _g, name, _i in iter_fields()} | _allowed_values()
    found = [(where, text, words) for where, text in _form_strings(zh_board) if (words := untranslated(text, allowed))]
    assert not found, "English left in the Chinese board:\n" + "\n".join(
        f"  {where}: {words} in {text!r}" for where, text, words in found[:40]
    )
    assert len(_form_strings(zh_board)) > 500  # the walk saw the whole form


def test_the_chinese_board_labels_options_in_words_and_help_says_default_in_chinese(zh_board):
    form = zh_board.tk_forms["train"]
    assert form["learning_rate"].label == "学习率"
    assert form["learning_rate"].info == "`learning_rate` · 峰值学习率。 [默认: 5e-05]"
    assert form["num_train_epochs"].label == "训练轮数" and form["lora_rank"].label == "LoRA 秩"
    assert [acc.label for acc, _g, _specs in form.groups][:4] == ["基座模型", "数据", "训练阶段", "微调方法"]
    assert dict(form["deepspeed"].choices)["阶段 3 + 卸载到 CPU"] == "z3_offload"
    assert dict(form["deepspeed"].choices)["不使用"] == ""
    assert ("（无）", "") in form["quantization_bit"].choices and ("（自动）", "") in form["tf32"].choices


def test_the_checker_finds_english(zh_board):
    """The check itself: an English help line or label is caught, option names and values are not."""
    allowed = {"learning_rate", "cosine"}
    assert untranslated("Peak learning rate.", allowed) == ["Peak", "learning", "rate"]
    assert untranslated("`learning_rate` · 学习率 cosine LoRA bf16 z3_offload saves/run", allowed) == []
    assert untranslated("(none)", allowed) == ["none"]  # the English word for unset


def test_the_language_switch_relabels_options_and_choices():
    from tunekit.webui.app import create_app

    form = create_app(lang="en").tk_forms["train"]
    updates = dict(zip(form.specs, form.updates(lang="zh", labels=True)))
    by_name = {s.name: u for s, u in updates.items()}
    assert by_name["learning_rate"]["label"] == "学习率"
    assert by_name["learning_rate"]["info"] == "`learning_rate` · 峰值学习率。 [默认: 5e-05]"
    assert by_name["weight_decay"]["label"] == "权重衰减"
    assert ("阶段 2", "z2") in by_name["deepspeed"]["choices"]
    back = {s.name: u for s, u in zip(form.specs, form.updates(lang="en", labels=True))}
    assert back["learning_rate"]["label"] == "Learning rate" and ("stage 2", "z2") in back["deepspeed"]["choices"]
