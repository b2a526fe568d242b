"""Option help generated from the schema (used by ``tunekit <verb> --help``)."""

from __future__ import annotations

import textwrap


def format_options_help(groups=None) -> str:
    from tunekit.config.options import GROUPS

    out = []
    for group in groups or GROUPS:
        out.append(f"\n{group.TITLE}:")
        for name, info in group.model_fields.items():
            default = info.default
            default_s = "" if default is None else f" [default: {default}]"
            text = f"{info.description or ''}{default_s}"
            wrapped = textwrap.wrap(text, width=78) or [""]
            out.append(f"  --{name}")
            out.extend(f"      {line}" for line in wrapped)
    return "\n".join(out) + "\n"
