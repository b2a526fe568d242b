"""The one reader of an option's JSON file (``deepspeed``, ``fsdp_config``): a JSON object, or a
:class:`~tunekit.errors.ConfigError` naming the option, the file and the mistake."""

from __future__ import annotations

import json
from pathlib import Path

from .problems import config_error


def read_json_object(path: Path, option: str) -> dict:
    """``path`` (an existing file) parsed; it must hold a JSON object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise config_error("json_invalid", (option,), option=option, path=str(path), error=str(exc)) from None
    except UnicodeDecodeError as exc:
        raise config_error("json_not_utf8", (option,), option=option, path=str(path), byte=exc.start) from None
    if not isinstance(data, dict):
        raise config_error("json_not_object", (option,), option=option, path=str(path), kind=type(data).__name__)
    return data
