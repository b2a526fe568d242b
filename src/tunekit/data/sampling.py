"""``num_samples`` of a dataset_info.json entry: how many records of that dataset a run reads, as in LLaMA-Factory.

The records are put in a random order drawn from the run's ``seed`` and the first ``num_samples`` kept, so a run
(and its resume) reads the same records; a ``num_samples`` above the dataset's size keeps every record once and
draws the rest again at random (with replacement: upsampling). It applies per dataset, to training and evaluation
datasets alike, before ``max_samples`` (which then keeps the first of the sampled records) and before ``val_size``
splits the training data.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def sample_indexes(size: int, num_samples: int, seed: int) -> list[int]:
    """The record indexes ``num_samples`` selects from a dataset of ``size`` records with ``seed``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    picked = rng.permutation(size)[:num_samples]
    extra = num_samples - len(picked)
    if extra > 0:  # every record once (the whole permutation), the rest drawn again with replacement
        picked = np.concatenate((picked, rng.choice(size, extra, replace=True)))
    return [int(i) for i in picked]


def sampling_note(name: str, size: int, num_samples: int) -> str:
    """The line the run prints and ``preprocessing_report.json`` keeps for a sampled dataset."""
    note = f"dataset {name}: sampled {num_samples} of {size} records (num_samples, seed-shuffled)"
    if num_samples > size:
        note += f"; upsampled: every record once, {num_samples - size} drawn again at random"
    return note


def apply_num_samples(records: list[T], name: str, num_samples: int | None, seed: int) -> tuple[list[T], str | None]:
    """``(the records num_samples selects, the note saying so)``; all records and no note without num_samples."""
    if num_samples is None or not records:
        return records, None
    picked = [records[i] for i in sample_indexes(len(records), num_samples, seed)]
    return picked, sampling_note(name, len(records), num_samples)
