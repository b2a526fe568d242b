"""The options reference (docs/options.md), generated from the schema so it can never drift."""

from __future__ import annotations

import types
import typing

from .options import GROUPS
from .options.facts import format_default, option_facts, option_note


def _type_text(annotation) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):  # Optional[X] and X | None
        parts = [_type_text(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin is dict:
        return "Dict"  # the reference's word from when the annotation was typing.Dict
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def render_options_markdown() -> str:
    lines = [
        "# Options",
        "",
        "Every option of `tunekit train` (and the other verbs), generated from the schema in",
        "`src/tunekit/config/options/` by `python scripts/gen_options_doc.py`. Names follow LLaMA-Factory and",
        "Hugging Face `TrainingArguments`; set them in YAML/JSON, as `key=value`, or as `--key value`.",
        "",
    ]
    for group in GROUPS:
        lines += [f"## {group.TITLE}", "", "| option | type | default | meaning |", "|---|---|---|---|"]
        for name, info in group.model_fields.items():
            shown = format_default(info.default)  # as the CLI help and the board write it
            default = f"`{shown}`" if shown else ""
            note = option_note(option_facts(info))
            desc = ((f"*{note[:1].upper()}{note[1:]}.* " if note else "") + (info.description or "")).replace(
                "|", "\\|"
            )
            lines.append(f"| `{name}` | {_type_text(info.annotation)} | {default} | {desc} |")
        lines.append("")
    return "\n".join(lines)
