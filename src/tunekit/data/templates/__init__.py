"""Chat templates: render conversations exactly as each model family expects, and mark what is trained.

>>> tpl = get_template("qwen", tokenizer)
>>> messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
>>> [(prompt, reply)] = tpl.encode_turns(messages)
>>> prompt
'<|im_start|>system\\n...<|im_end|>\\n<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
>>> reply
'Hello<|im_end|>'

Names follow LLaMA-Factory; ``jinja`` uses the tokenizer's own ``chat_template``. Importing this package
is cheap (no torch/transformers).
"""

from __future__ import annotations

import difflib
from dataclasses import replace
from typing import Any

from tunekit.config.problems import Said, config_error

from .base import Template
from .jinja_mode import JinjaTemplate
from .registry import BY_NAME, JINJA_DESCRIPTION, SPECS, TEMPLATE_CLASSES
from .tokenizer_fix import FALLBACK_EOS

__all__ = ["Template", "get_template", "list_templates", "describe_templates"]


def list_templates() -> list[str]:
    """All template names (``jinja`` last)."""
    return [s.name for s in SPECS] + ["jinja"]


def describe_templates() -> dict[str, str]:
    """name -> one-line description."""
    return {**{s.name: s.description for s in SPECS}, "jinja": JINJA_DESCRIPTION}


def _adds_bos(tokenizer: Any) -> bool:
    """Whether the tokenizer itself puts BOS in front of a text (then the model was trained with it)."""
    if getattr(tokenizer, "bos_token_id", None) is None:
        return False
    try:
        ids = tokenizer("a", add_special_tokens=True)["input_ids"]
    except Exception:  # a tokenizer that cannot encode plain text here: fall back to its flag
        return bool(getattr(tokenizer, "add_bos_token", False))
    return bool(ids) and ids[0] == tokenizer.bos_token_id


def get_template(
    name: str, tokenizer: Any = None, *, tool_format: str | None = None, empty_eos: bool = True
) -> Template:
    """The template called ``name``, using ``tokenizer``'s BOS/EOS strings where its format needs them.

    ``empty_eos=False`` (option ``empty_template_eos``): template ``empty`` ends replies without EOS, as
    LLaMA-Factory's ``empty`` does (tunekit's default adds it, so the model learns to stop).
    """
    if name == "jinja":
        return JinjaTemplate(tokenizer)
    spec = BY_NAME.get(name)
    if spec is None:
        close = difflib.get_close_matches(str(name), list_templates(), n=3, cutoff=0.5)
        hint = Said("part_did_you_mean", names=tuple(close)) if close else None
        available = ", ".join(list_templates())
        raise config_error("template_unknown", ("template",), name=str(name), hint=hint, available=available)
    if name == "empty" and not empty_eos:
        spec = replace(
            spec, assistant="{content}", description=spec.description.replace(", each reply ends with EOS", "")
        )
    bos, eos = spec.bos, spec.eos
    if tokenizer is not None:
        bos = getattr(tokenizer, "bos_token", None) or spec.bos
        eos = getattr(tokenizer, "eos_token", None) or FALLBACK_EOS
        if spec.auto_bos and not _adds_bos(tokenizer):
            bos = ""
    elif spec.auto_bos:
        bos = ""
    return TEMPLATE_CLASSES.get(name, Template)(spec, bos=bos, eos=eos, tool_format=tool_format)
