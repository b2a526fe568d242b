"""Validate form values with the schema and attach each message to the option(s) it names."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from tunekit.config import Config, build_config
from tunekit.errors import ConfigError


@dataclass
class Validation:
    config: Config | None
    message: str = ""
    by_field: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.config is not None


def _names_in(line: str, names: set[str]) -> list[str]:
    quoted = re.findall(r"'([A-Za-z0-9_]+)'", line)
    first = [n for n in quoted if n in names][:1]
    if first and line.startswith(("Option '", "Unknown option '")):
        return first  # a field-level message: it is about this one option
    words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", line)
    return list(dict.fromkeys(w for w in words if w in names))


def validate(values: Mapping[str, Any]) -> Validation:
    """Build the config the form stands for; on failure, map each message line to its fields."""
    try:
        cfg = build_config(dict(values), {k: "in the form" for k in values})
    except ConfigError as exc:
        message = str(exc)
        names = set(Config.model_fields)
        by_field: dict[str, list[str]] = {}
        for line in message.splitlines():
            for name in _names_in(line, names):
                by_field.setdefault(name, []).append(line)
        return Validation(None, message, by_field)
    return Validation(cfg)
