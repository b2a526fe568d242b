"""tunekit's own environment variables, read one way everywhere: on/off switches and the cache folder.

Cheap to import (no third-party modules): the CLI's help path and the start-up switches use it.
"""

from __future__ import annotations

import os
from pathlib import Path

FALSE = ("0", "false", "no", "off")


def env_flag(name: str, default: bool) -> bool:
    """A switch such as ``TUNEKIT_WARM=0``: unset or empty gives ``default``; 0/false/no/off (any case) is off,
    anything else on."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    return value not in FALSE


def cache_dir(*parts: str) -> Path:
    """``$TUNEKIT_CACHE`` (default ``~/.cache/tunekit``), joined with ``parts``."""
    root = os.environ.get("TUNEKIT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tunekit")
    return Path(root, *parts)
