"""Comma-separated option values (``lora_target: q_proj, v_proj``, ``adapter_name_or_path: a,b``), split one way."""

from __future__ import annotations

from typing import Any


def split_list(value: Any) -> list[str]:
    """``value`` split at commas, each part stripped, blank parts dropped; ``None`` or ``""`` gives ``[]``."""
    if not value:
        return []
    return [part.strip() for part in str(value).split(",") if part.strip()]
