"""What the schema knows about an option beside its type, default and description, declared on the field itself.

Declare an option with :func:`option` (``Field`` plus these facts, kept in the field's ``json_schema_extra``):

- ``section``: the web board's section for it when that is not its group's (``quantization``, ``lora``, ...);
- ``only``: the ``finetuning_type`` it belongs to (``lora``, ``freeze``, ``oft``, ``ptuning``, ``prompt``): the schema
  refuses it when it is set with another method (``LORA_ONLY`` & co. in ``config/options/__init__.py`` are read from
  here);
- ``needs``: the true/false option that switches it on (``galore_rank`` needs ``use_galore``): the schema refuses it
  set while its switch is off (``SWITCHED`` in ``config/options/__init__.py`` is read from here);
- ``status="ignored"``: accepted so LLaMA-Factory configs load unchanged, and without effect in tunekit.

The CLI help, the board's help lines and ``docs/options.md`` all write an option's default and these facts with
:func:`format_default` and :func:`option_note`, so the three read the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import Field
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

METHODS = ("lora", "freeze", "oft", "ptuning", "prompt")  # values of ``only``
STATUSES = ("ignored",)  # values of ``status``
_FACTS = ("section", "only", "needs", "status")

# The facts as a short note in each language of the board (English: CLI help and docs too).
NOTES: dict[str, dict[str, str]] = {
    "lora": {"en": "LoRA only", "zh": "仅用于 LoRA"},
    "freeze": {"en": "freeze only", "zh": "仅用于 freeze"},
    "oft": {"en": "OFT only", "zh": "仅用于 OFT"},
    "ptuning": {"en": "P-Tuning v2 only", "zh": "仅用于 ptuning"},
    "prompt": {"en": "prompt tuning only", "zh": "仅用于 prompt"},
    "ignored": {
        "en": "accepted for LLaMA-Factory configs, ignored",
        "zh": "为兼容 LLaMA-Factory 配置而接受，不起作用",
    },
}
NEEDS = {"en": "needs {switch}: true", "zh": "需要 {switch}: true"}
DEFAULT_WORD = {"en": "default", "zh": "默认"}


@dataclass(frozen=True)
class OptionFacts:
    section: str | None = None
    only: str | None = None
    needs: str | None = None
    status: str | None = None


def option(
    default: Any = PydanticUndefined,
    *,
    description: str,
    section: str | None = None,
    only: str | None = None,
    needs: str | None = None,
    status: str | None = None,
    **constraints: Any,
) -> Any:
    """``Field(default, description=..., **constraints)`` carrying the option's facts (see the module's docstring)."""
    if only is not None and only not in METHODS:
        raise ValueError(f"option(only={only!r}): use one of {', '.join(METHODS)}")
    if status is not None and status not in STATUSES:
        raise ValueError(f"option(status={status!r}): use one of {', '.join(STATUSES)}")
    facts = {
        k: v for k, v in (("section", section), ("only", only), ("needs", needs), ("status", status)) if v is not None
    }
    return Field(default, description=description, json_schema_extra=facts or None, **constraints)


def option_facts(info: FieldInfo) -> OptionFacts:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return OptionFacts(**{k: extra[k] for k in _FACTS if k in extra})


def format_default(value: Any) -> str:
    """An option's default as written in YAML (``true``, ``5e-05``, ``all``); ``""`` when there is none to show
    (no default, or null: unset)."""
    if value is PydanticUndefined or value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str) and value == "":
        return '""'
    return str(value)


def option_note(facts: OptionFacts, lang: str = "en") -> str:
    """``LoRA only``, ``needs use_galore: true``, ``accepted for LLaMA-Factory configs, ignored``, ... (``""`` without
    such facts)."""
    words = [NOTES[key].get(lang, NOTES[key]["en"]) for key in (facts.only, facts.status) if key is not None]
    if facts.needs:
        words.insert(len(words) - (facts.status is not None), NEEDS.get(lang, NEEDS["en"]).format(switch=facts.needs))
    return "; ".join(words)


def option_help(description: str, default: Any, facts: OptionFacts, lang: str = "en") -> str:
    """One option's help line: ``description (note) [default: value]`` (CLI help and the board; ``description`` in
    ``lang``)."""
    note, shown = option_note(facts, lang), format_default(default)
    word = DEFAULT_WORD.get(lang, DEFAULT_WORD["en"])
    return description + (f" ({note})" if note else "") + (f" [{word}: {shown}]" if shown else "")
