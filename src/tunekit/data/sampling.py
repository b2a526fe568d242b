"""How many records of each dataset a run reads: ``num_samples`` of a dataset_info.json entry, as in LLaMA-Factory,
and ``dataset_sampling`` (LLaMA-Factory v1's dataset-list ``size`` / ``weight``, below).

The records are put in a random order drawn from the run's ``seed`` and the first ``num_samples`` kept, so a run
(and its resume) reads the same records; a ``num_samples`` above the dataset's size keeps every record once and
draws the rest again at random (with replacement: upsampling). It applies per dataset, to training and evaluation
datasets alike, before ``max_samples`` (which then keeps the first of the sampled records) and before ``val_size``
splits the training data.
"""

from __future__ import annotations

import zlib
from typing import TypeVar

from ..errors import ConfigError

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


# ---------------------------------------------------------------- dataset_sampling (LLaMA-Factory v1 size / weight)


def draw_indexes(size: int, draw: dict[str, float], name: str, seed: int) -> list[int]:
    """The record indexes ``dataset_sampling``'s ``{size, weight}`` draw from a dataset of ``size`` records, as
    LLaMA-Factory v1's ``adjust_data_index`` draws them: ``size`` draws that many at random with replacement, then
    ``weight`` draws ``int(count x weight)`` at random with replacement from those. The random stream is the run's
    ``seed`` with the dataset's name (its CRC-32), so each dataset draws on its own and a run (and its resume) draws
    the same indexes."""
    import numpy as np

    rng = np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])
    picked = np.arange(size)
    if draw.get("size") is not None:
        picked = picked[rng.integers(0, len(picked), int(draw["size"]))]
    if draw.get("weight") is not None:
        picked = picked[rng.integers(0, len(picked), int(len(picked) * draw["weight"]))]
    return [int(i) for i in picked]


def draw_note(name: str, size: int, draw: dict[str, float], picked: list[int]) -> str:
    """The line the run prints and ``preprocessing_report.json`` keeps for a dataset ``dataset_sampling`` drew from."""
    given = ", ".join(
        f"size {int(value)}" if key == "size" else f"weight {value:g}"
        for key, value in sorted(draw.items(), key=lambda item: item[0] != "size")
        if value is not None
    )
    distinct = len(set(picked))
    return (
        f"dataset {name}: drew {len(picked)} samples from {size} records at random with replacement (dataset_sampling "
        f"{given}): {distinct} distinct records, {len(picked) - distinct} repeats, {size - distinct} records not drawn"
    )


def apply_draw(records: list[T], name: str, draw: dict[str, float] | None, seed: int) -> tuple[list[T], str | None]:
    """``(the records dataset_sampling draws, the note saying so)``; all records and no note without a draw."""
    if not draw:
        return records, None
    if not records:
        return records, f"dataset {name}: no records to draw from (dataset_sampling)"
    picked = draw_indexes(len(records), draw, name, seed)
    return [records[i] for i in picked], draw_note(name, len(records), draw, picked)


def check_sampling_names(sampling: dict[str, dict] | None, datasets: list[str], eval_datasets: list[str]) -> None:
    """Every name ``dataset_sampling`` gives is a dataset of the run: a name that is not would be ignored."""
    unknown = [name for name in sampling or {} if name not in datasets and name not in eval_datasets]
    if unknown:
        names = ", ".join(datasets + [n for n in eval_datasets if n not in datasets]) or "none"
        raise ConfigError(
            f"dataset_sampling names {', '.join(unknown)}, which is not a dataset of this run (dataset / "
            f"eval_dataset: {names}); name each dataset as dataset or eval_dataset writes it, or remove its entry."
        )


def select_records(records: list[T], name: str, num_samples: int | None, cfg) -> tuple[list[T], str | None]:
    """The records a run reads of dataset ``name``, for training and ``tunekit predict`` alike: ``num_samples``
    first, then ``dataset_sampling``'s draw, then the first ``max_samples``; with the note saying what was drawn."""
    records, sampled = apply_num_samples(records, name, num_samples, cfg.seed)
    records, drawn = apply_draw(records, name, (cfg.dataset_sampling or {}).get(name), cfg.seed)
    if cfg.max_samples:
        records = records[: cfg.max_samples]
    return records, "; ".join(note for note in (sampled, drawn) if note) or None
