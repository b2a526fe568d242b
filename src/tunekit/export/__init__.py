"""Export: merge adapters into the base, shard, quantize, consolidate ZeRO checkpoints, verify the folder.

``export_model(cfg) -> Path`` writes a standard Hugging Face folder; ``verify.verify_export(path)`` checks it
with plain transformers. Both are what ``tunekit export`` / ``tunekit verify`` and the web board call.
"""

from __future__ import annotations

from .exporter import export_model

__all__ = ["export_model"]
