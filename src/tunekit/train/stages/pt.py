"""Stage ``pt``: continued pretraining — next-token loss on every token of plain-text blocks.

Data: :mod:`tunekit.data.processors.pt` (texts + EOS concatenated and cut into ``cutoff_len``
blocks with packing, the default). The loss and its token-normalisation across accumulation are the
same as SFT's (every label is a real token), so the trainer is SFT's.
"""

from __future__ import annotations

from ...config.schema import Config
from .sft import build_trainer as sft_trainer


def build_trainer(cfg: Config, args, model, tokenizer, data, callbacks):

    return sft_trainer(cfg, args, model, tokenizer, data, callbacks)
