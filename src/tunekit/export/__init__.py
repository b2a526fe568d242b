"""Export: merge adapters into the base, shard, quantize, consolidate ZeRO checkpoints, verify the folder.

``export_model(cfg) -> Path`` writes a standard Hugging Face folder; ``verify.verify_export(path)`` checks it
with plain transformers. Both are what ``tunekit export`` / ``tunekit verify`` and the web board call.
"""

from __future__ import annotations

from pathlib import Path


def export_model(cfg, verify: bool | None = None) -> Path:
    from .exporter import export_model as _export

    return _export(cfg, verify=verify)


__all__ = ["export_model"]
