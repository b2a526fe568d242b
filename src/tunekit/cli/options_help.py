"""Option help generated from the schema (used by ``tunekit <verb> --help``)."""

from __future__ import annotations

import hashlib
import os
import textwrap
from pathlib import Path

from tunekit.env import cache_dir

_OPTIONS_DIR = Path(__file__).resolve().parent.parent / "config" / "options"


def format_options_help(groups=None) -> str:
    """The option list; the full list is cached on disk, because building the pydantic schema takes
    most of a second and ``tunekit train --help`` should answer at once. The cache key covers every
    file of ``config/options`` (name, size, mtime), so an edited option is never shown stale."""
    if groups is not None:
        return _format(groups)
    try:
        sig = "|".join(
            f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in sorted(_OPTIONS_DIR.glob("*.py"))
        )
        cached = cache_dir("help", hashlib.sha256(sig.encode()).hexdigest()[:20] + ".txt")
        if cached.is_file():
            return cached.read_text(encoding="utf-8")
    except OSError:
        return _format(None)
    text = _format(None)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(cached)
    except OSError:
        pass
    return text


def _format(groups) -> str:
    # the schema (pydantic) only when the cached text is missing or stale: `tunekit train --help` stays at a few
    # hundredths of a second (benchmarks/help_time.py)
    from tunekit.config.options import GROUPS, facts

    out = []
    for group in groups or GROUPS:
        out.append(f"\n{group.TITLE}:")
        for name, info in group.model_fields.items():
            text = facts.option_help(info.description or "", info.default, facts.option_facts(info))  # the board's too
            wrapped = textwrap.wrap(text, width=78) or [""]
            out.append(f"  --{name}")
            out.extend(f"      {line}" for line in wrapped)
    return "\n".join(out) + "\n"
