"""The command line and the YAML a form stands for, and the exact argv the board runs.

The board starts ``tunekit train`` (Train, Evaluate & predict), ``tunekit export`` and ``tunekit verify`` (Export)
with the same arguments it shows in each tab's command box (:func:`verb_line` of the argv the job gets), so a
previewed command, pasted into a shell, runs what a start from the board runs.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping
from typing import Any

from tunekit.config import parse_scalar

# The only programs the board ever starts: tunekit's own verbs, through this interpreter.
ALLOWED_VERBS = ("train", "export", "verify", "env")


def format_value(value: Any) -> str:
    """A command-line value that :func:`tunekit.config.parse_scalar` reads back as ``value``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        parsed = parse_scalar(value)
        if isinstance(parsed, str) and parsed == value and "\n" not in value:
            return value
        return json.dumps(value, ensure_ascii=False)  # JSON strings are YAML strings
    return json.dumps(value, ensure_ascii=False)  # dicts / lists: YAML flow style


def override_args(values: Mapping[str, Any]) -> list[str]:
    return [f"{key}={format_value(value)}" for key, value in values.items()]


def command_line(values: Mapping[str, Any], verb: str = "train") -> str:
    """``tunekit train key=value ...``, quoted for a POSIX shell."""
    return verb_line(verb, override_args(values))


def verb_line(verb: str, args: list[str]) -> str:
    """``tunekit <verb> args``, quoted for a POSIX shell: what a job started with these ``args`` runs."""
    return " ".join(["tunekit", verb] + [shlex.quote(arg) for arg in args])


def yaml_text(values: Mapping[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(dict(values), sort_keys=False, allow_unicode=True) if values else "{}\n"


# ``-P`` (Python 3.11+): the working folder is not put first on the import path, so a ``yaml.py`` or
# ``torch.py`` in it cannot run as the job's ``import yaml``; ``-I`` (isolated mode) on Python 3.10.
SAFE_PATH_FLAGS = ["-P"] if sys.version_info >= (3, 11) else ["-I"]


def verb_argv(verb: str, args: list[str]) -> list[str]:
    """The argv that runs ``tunekit <verb> args`` with the board's own interpreter (no shell)."""
    if verb not in ALLOWED_VERBS:
        raise ValueError(f"the board only runs tunekit's own verbs {ALLOWED_VERBS}, not {verb!r}")
    return [sys.executable, *SAFE_PATH_FLAGS, "-m", "tunekit.cli.main", verb, *args]
