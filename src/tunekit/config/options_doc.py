"""The options reference (docs/options.md), generated from the schema so it can never drift."""

from __future__ import annotations

import typing

from .options import GROUPS


def _type_text(annotation) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin is typing.Union:
        parts = [_type_text(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def render_options_markdown() -> str:
    lines = ["# Options", "",
             "Every option of `tunekit train` (and the other verbs), generated from the schema in",
             "`src/tunekit/config/options/` by `python scripts/gen_options_doc.py`. Names follow LLaMA-Factory and",
             "Hugging Face `TrainingArguments`; set them in YAML/JSON, as `key=value`, or as `--key value`.", ""]
    for group in GROUPS:
        lines += [f"## {group.TITLE}", "", "| option | type | default | meaning |", "|---|---|---|---|"]
        for name, info in group.model_fields.items():
            default = "" if info.default is None else f"`{info.default}`"
            desc = (info.description or "").replace("|", "\\|")
            lines.append(f"| `{name}` | {_type_text(info.annotation)} | {default} | {desc} |")
        lines.append("")
    return "\n".join(lines)
