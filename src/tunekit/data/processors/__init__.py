"""Per-stage processors: canonical samples → token ids, labels and bookkeeping columns.

A processor is a module with ``process(batch, ctx) -> dict[str, list]`` (used with ``datasets.map``
in batched mode). Every processor also returns ``_status`` (0 whole, 1 truncated, 2 dropped) and
``_source`` so the pipeline can report each truncated or dropped sample by file and record.
"""

from __future__ import annotations

import importlib

KEPT, TRUNCATED, DROPPED = 0, 1, 2

PROCESSORS = {
    "sft": "tunekit.data.processors.sft",
    "pt": "tunekit.data.processors.pt",
    "rm": "tunekit.data.processors.pairwise",
    "dpo": "tunekit.data.processors.pairwise",
    "kto": "tunekit.data.processors.kto",
    "ppo": "tunekit.data.processors.prompt",
    "grpo": "tunekit.data.processors.prompt",
}


def get_processor(stage: str):
    if stage not in PROCESSORS:
        from ...errors import ConfigError

        raise ConfigError(f"stage '{stage}' has no data processor yet (available: {', '.join(PROCESSORS)}).")
    return importlib.import_module(PROCESSORS[stage])
