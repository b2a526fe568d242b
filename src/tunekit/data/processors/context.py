"""What a processor needs besides the batch (picklable, so ``datasets.map`` can use worker processes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class ProcessContext:
    tokenizer: Any
    template: Any
    cutoff_len: int
    train_on_prompt: bool = False
    mask_history: bool = False
    enable_thinking: bool = True
    default_system: Optional[str] = None
    packing: bool = False  # pt: concatenate texts into cutoff_len blocks
    ignore_index: int = -100

    def system_for(self, sample_system: str | None) -> str | None:
        return sample_system or self.default_system or None

    def encode_pieces(self, pieces: list[str]) -> list[list[int]]:
        """Tokenize text pieces independently (no special tokens added: templates write BOS/EOS as text)."""
        if not pieces:
            return []
        return self.tokenizer(pieces, add_special_tokens=False)["input_ids"]
