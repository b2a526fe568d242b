"""The one reader of an option's JSON file (``deepspeed``, ``fsdp_config``): a JSON object, or a
:class:`~tunekit.errors.ConfigError` naming the option, the file and the mistake."""

from __future__ import annotations

import json
from pathlib import Path

from tunekit.errors import ConfigError


def read_json_object(path: Path, option: str) -> dict:
    """``path`` (an existing file) parsed; it must hold a JSON object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{option}: {path} is not valid JSON ({exc}).") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{option}: {path} is not UTF-8 text (byte {exc.start}); it must be a JSON file.") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{option}: {path} must hold a JSON object, found {type(data).__name__}.")
    return data
