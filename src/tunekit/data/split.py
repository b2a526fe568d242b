"""How many samples ``val_size`` holds out: the one rule ``data/pipeline.py`` splits with and ``plan``/``train``
count steps with (``train/steps.py``)."""

from __future__ import annotations


def split_sizes(num_samples: int, val_size: float) -> tuple[int, int]:
    """``(train, eval)`` sizes for ``val_size`` (a fraction below 1, or a whole count)."""
    if val_size <= 0:
        return num_samples, 0
    n_eval = int(val_size * num_samples) if val_size < 1 else int(val_size)
    n_eval = max(n_eval, 1)
    return num_samples - n_eval, n_eval
