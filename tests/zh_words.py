"""The check that a Chinese text shows no untranslated English (the Chinese board: ``tests/webui/test_webui_zh.py``,
the config's problems said in Chinese: ``tests/webui/test_problems_zh.py``).

A string is split into words; a word passes when it is an option name or value, code (set in backticks, or with
``_ . / :`` or a digit in it: a file, a preset, a variable; a CamelCase class name), a single letter (r, N: a
formula's variable), or one of :data:`TERMS`. Everything else is English a Chinese reader was not given in Chinese.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from pathlib import Path

from tunekit.config import iter_fields
from tunekit.messages import Keyed
from tunekit.webui.fields import field_specs

# Names of tools, models, methods and units, written the same in Chinese text (LLaMA Board's Chinese keeps them).
_TERMS = """
LoRA LoRA+ QLoRA DoRA rsLoRA PiSSA OFT QOFT GaLore APOLLO APOLLO-Mini BAdam Adam AdamW Adam-mini Muon LLaMA Pro
SFT RLHF PPO DPO cDPO KTO GRPO SimPO GAE KL DFT EAFT ASFT ZeRO DeepSpeed FSDP DDP RoPE FP8 TF32 Float8Linear
GPU CPU API URL ID JSON MB GB Hz EOS LM MLP SVD SwiGLU RMSNorm FlashAttention-2 Liger Unsloth SwanLab tunekit
LLaMA-Factory Hugging Face Qwen-VL Qwen2-VL NVIDIA Hopper Ampere Transformer Engine Rust Ziegler Wu Retry-After
transformers accelerate bitsandbytes liger-kernel flash-attn galore-torch apollo-torch adam-mini unsloth optimum
gptqmodel GPTQ safetensors pickle base64 Top-k Top-p token rollout dropout logits logit alpha Beta beta epsilon
lambda merger all-gather ftx NEFTune Trainer ChatGLM peft Ascend NPU MoE YAML GGUF llama.cpp Ollama Modelfile
llm-compressor compressed-tensors P-Tuning KV torch Megatron-Core Megatron-Bridge KTransformers Ray torchrun
"""

TERMS = set(_TERMS.split())
HAN = re.compile(r"[\u4e00-\u9fff]")  # a Chinese character
WORD = re.compile(r"[A-Za-z][A-Za-z0-9+\-_.:/]*[A-Za-z0-9+]|[A-Za-z]")
CODE = re.compile(r"`[^`]*`|\[默认: [^\]]*\]")  # code, and a default (a value)


def allowed_values() -> set[str]:
    """The options' values a Chinese text writes as they are (choices, stages, methods, true/false)."""
    values = {"true", "false", "null", "auto", "all"}
    for spec in field_specs():
        values.update(str(c) for c in spec.choices)
    values.update(("pt", "sft", "rm", "ppo", "dpo", "kto", "grpo", "lora", "oft", "freeze", "full"))
    return values


def untranslated(text: str, allowed: set[str]) -> list[str]:
    """The English words of ``text`` that are none of ``allowed``, code or :data:`TERMS`."""
    words = []
    for found in WORD.findall(CODE.sub(" ", text or "")):
        word = found.rstrip(".:-")
        if len(word) <= 1 or word in allowed or word in TERMS or re.search(r"[_./:0-9]|[a-z][A-Z]", word):
            continue
        words.append(word)
    return words


def option_words() -> set[str]:
    """Every option's name and value: written as they are in a Chinese text."""
    return {name for _g, name, _i in iter_fields()} | allowed_values()


def value_words(message, skip_keys: tuple[str, ...] = ()) -> set[str]:
    """The words of a keyed message's values (names, paths, excerpts, a library's own text: shown as they are in
    every language); the values of a part keyed in ``skip_keys`` are not counted."""
    words, stack = set(), [message]
    while stack:
        item = stack.pop()
        if isinstance(item, Keyed):
            if item.key not in skip_keys:
                stack.extend(item.values.values())
        elif isinstance(item, (tuple, list)):
            stack.extend(item)
        elif isinstance(item, str):
            for word in re.findall(r"[A-Za-z][\w+\-.:/]*", item):
                words.update((word, word.rstrip(".:-")))  # as written, and without the sentence's punctuation
    return words


def said_in_both(exc: BaseException, english: str, chinese: str) -> None:
    """``exc`` reads ``english`` (the CLI's text) and the Chinese board says ``chinese``, with no English but its
    values, option names and code."""
    from types import SimpleNamespace

    from tunekit.webui.problems_zh import say_error

    assert str(exc) == english
    assert say_error(exc, "en") == english
    zh = say_error(exc, "zh")
    assert zh == chinese
    message = (getattr(exc, "problems", None) or [SimpleNamespace(message=exc.args[0])])[0].message
    assert untranslated(zh, option_words() | value_words(message)) == [], zh


# ---------------------------------------------------------------- messages written in place (a module's source)
USER_ERRORS = ("TunekitError", "ConfigError", "DataError", "RecordError", "ModelError", "EnvironmentProblem")
_TEXT = (ast.JoinedStr, ast.Constant, ast.BinOp)  # a sentence written in place: English only
_KEYED = ("Said", "EnvSaid", "config_error", "_what")  # formats.py's _what(key, index) caches Said(key, ...)


def unkeyed_messages(path: Path, english: Mapping[str, str]) -> tuple[list[int], list[int]]:
    """The lines of ``path`` where a user message could not be said in Chinese: a user error raised, a problem
    reported (``_problem(report, ...)``) or listed (``problems.append(...)``, ``problems = [...]``) with a sentence
    written in place; and a keyed message whose key (``Said(key)``, ``partial(Said, key)``, ``Said(a if x else b)``,
    an f-string key naming the start of some) is not one of ``english``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside_what = {id(n) for f in ast.walk(tree) if getattr(f, "name", "") == "_what" for n in ast.walk(f)}
    written, unknown = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "problems" for t in node.targets):
            lists = [item for item in ast.walk(node.value) if isinstance(item, ast.List)]
            written += [item.lineno for listed in lists for item in listed.elts if isinstance(item, _TEXT)]
        if not isinstance(node, ast.Call) or not node.args or id(node) in inside_what:
            continue
        name, args = getattr(node.func, "id", "") or getattr(node.func, "attr", ""), node.args
        if name == "partial" and getattr(args[0], "id", "") == "Said":
            name, args = "Said", args[1:]
        listed = name == "append" and getattr(node.func.value, "id", "") == "problems"
        if (name in USER_ERRORS or listed) and isinstance(args[0], _TEXT):
            written.append(node.lineno)
        if name in ("_problem", "problem") and len(args) > 1 and isinstance(args[1], _TEXT):
            written.append(node.lineno)
        keys = [args[0].body, args[0].orelse] if isinstance(args[0], ast.IfExp) else [args[0]]
        if name in _KEYED and not all(_known(key, english) for key in keys):
            unknown.append(node.lineno)
    return written, unknown


def _known(key: ast.expr, english: Mapping[str, str]) -> bool:
    if isinstance(key, ast.JoinedStr) and isinstance(key.values[0], ast.Constant):
        return any(k.startswith(key.values[0].value) for k in english)
    return isinstance(key, ast.Constant) and key.value in english
