"""Collators of the preference and RL stages.

Labels travel as ``token_labels`` (not ``labels``): the HF Trainer would otherwise count label tokens
and skip its division by the accumulation steps, and these stages average per pair / per prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .losses import IGNORE_INDEX


def pad(rows: list[list[int]], value: int, multiple: int = 1, left: bool = False) -> torch.Tensor:
    longest = max(len(r) for r in rows)
    width = ((longest + multiple - 1) // multiple) * multiple if multiple > 1 else longest
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            if left:
                out[i, width - len(r):] = torch.as_tensor(r, dtype=torch.long)
            else:
                out[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
    return out


def mask_of(rows: list[list[int]], like: torch.Tensor, left: bool = False) -> torch.Tensor:
    mask = torch.zeros_like(like)
    for i, r in enumerate(rows):
        if left:
            mask[i, like.shape[1] - len(r):] = 1
        else:
            mask[i, : len(r)] = 1
    return mask


@dataclass
class PairCollator:
    """Chosen rows first, then rejected rows, in one right-padded batch of ``2B`` sequences (one forward)."""

    pad_token_id: int
    pad_to_multiple_of: int = 8

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        ids = [f["chosen_input_ids"] for f in features] + [f["rejected_input_ids"] for f in features]
        labels = [f["chosen_labels"] for f in features] + [f["rejected_labels"] for f in features]
        input_ids = pad(ids, self.pad_token_id, self.pad_to_multiple_of)
        batch = {"input_ids": input_ids, "attention_mask": mask_of(ids, input_ids),
                 "token_labels": pad(labels, IGNORE_INDEX, self.pad_to_multiple_of)}
        if "ref_chosen_logps" in features[0]:
            batch["ref_logps"] = torch.tensor([f["ref_chosen_logps"] for f in features] + [f["ref_rejected_logps"] for f in features])
        return batch


@dataclass
class MultimodalPairCollator(PairCollator):
    """:class:`PairCollator` for a vision-language model: the pair's images go with its chosen row and again with its
    rejected row (rows are chosen 0..B-1, then rejected 0..B-1), as the family plugin builds them (``data/mm_plugins``)."""

    mm: Any = None

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = super().__call__(features)
        paths = [p for f in features for p in (f.get("images") or [])]
        batch.update(self.mm.collate(paths + paths, batch["input_ids"]))
        return batch


@dataclass
class KTOCollator:
    """The examples, plus mismatched pairs (prompt i, ``kl_response_ids`` of i — another example's answer) for KTO's KL estimate."""

    pad_token_id: int
    pad_to_multiple_of: int = 8

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(features)
        ids = [f["input_ids"] for f in features]
        labels = [f["labels"] for f in features]
        kl_ids, kl_labels = [], []
        for i, f in enumerate(features):
            other = f["kl_response_ids"] if "kl_response_ids" in f else features[(i + 1) % n]["response_ids"]
            kl_ids.append(f["prompt_ids"] + other)
            kl_labels.append([IGNORE_INDEX] * len(f["prompt_ids"]) + other)
        input_ids = pad(ids, self.pad_token_id, self.pad_to_multiple_of)
        kl_input_ids = pad(kl_ids, self.pad_token_id, self.pad_to_multiple_of)
        batch = {
            "input_ids": input_ids, "attention_mask": mask_of(ids, input_ids),
            "token_labels": pad(labels, IGNORE_INDEX, self.pad_to_multiple_of),
            "kl_input_ids": kl_input_ids, "kl_attention_mask": mask_of(kl_ids, kl_input_ids),
            "kl_token_labels": pad(kl_labels, IGNORE_INDEX, self.pad_to_multiple_of),
            "desirable": torch.tensor([bool(f["kto_tag"]) for f in features]),
        }
        if "ref_logps" in features[0]:
            batch["ref_logps"] = torch.tensor([f["ref_logps"] for f in features])
            batch["ref_kl_logps"] = torch.tensor([f["ref_kl_logps"] for f in features])
        return batch


@dataclass
class PromptCollator:
    """Left-padded prompts for generation; texts and reference answers ride along for reward functions."""

    pad_token_id: int

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        ids = [f["input_ids"] for f in features]
        input_ids = pad(ids, self.pad_token_id, left=True)
        return {"input_ids": input_ids, "attention_mask": mask_of(ids, input_ids, left=True),
                "prompt_text": [f.get("prompt_text", "") for f in features],
                "reference": [f.get("reference", "") for f in features]}
