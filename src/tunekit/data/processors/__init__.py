"""Per-stage processors: canonical samples → token ids, labels and bookkeeping columns.

A processor is a module with ``process(batch, ctx) -> dict[str, list]`` (used with ``datasets.map``
in batched mode). Every processor also returns ``_status`` (0 whole, 1 truncated, 2 dropped) and
``_source`` so the pipeline can report each truncated or dropped sample by file and record.
"""

from __future__ import annotations

import importlib

from ...config.problems import Said
from ...config.stages import STAGES
from ...errors import ConfigError

KEPT, TRUNCATED, DROPPED = 0, 1, 2

PROCESSORS = {name: f"tunekit.data.processors.{stage.processor}" for name, stage in STAGES.items()}  # config/stages.py


def get_processor(stage: str):
    if stage not in PROCESSORS:
        raise ConfigError(Said("data_no_processor", stage=stage, available=", ".join(PROCESSORS)))
    return importlib.import_module(PROCESSORS[stage])
