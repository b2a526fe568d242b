"""What an export records of where it came from (``tunekit_export.json``): its base and adapters, where to find them
again, and the template settings ``tunekit verify`` renders with. One home for the merged and the adapter exports."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..config.schema import Config


def recorded(path: str | None) -> str | None:
    """A local folder as its absolute path; a hub id (no such local folder) as given."""
    if not path:
        return path
    local = Path(path).expanduser()
    return str(local.resolve()) if local.exists() else path


def relative_to(path: str | None, out: Path) -> str | None:
    if not path or not Path(path).is_absolute():
        return None
    try:
        return os.path.relpath(path, out.resolve())
    except ValueError:  # another drive (Windows)
        return None


def sources(base: str | None, adapters: list[str | None], out: Path) -> dict[str, Any]:
    """Local folders as absolute paths and relative to the export (a tree moved as a whole still resolves);
    ``tunekit verify`` finds them from any folder (``verify.resolve_recorded``). Hub ids as given."""
    return {
        "base": base,
        "adapters": adapters,
        "base_relative_to_export": relative_to(base, out),
        "adapters_relative_to_export": [relative_to(a, out) for a in adapters],
        "written_from": os.getcwd(),
    }


def template_settings(cfg: Config) -> dict[str, Any]:
    """The options that decide how the exported template renders (``tunekit verify`` renders with them)."""
    return {
        "template": cfg.template,
        "enable_thinking": cfg.enable_thinking,
        "default_system": cfg.default_system,
        "tool_format": cfg.tool_format,
        "empty_template_eos": cfg.empty_template_eos,
    }
