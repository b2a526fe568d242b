"""dataset_info.json ``num_samples``: the records a run reads, drawn as LLaMA-Factory draws them, said and cached by.

LLaMA-Factory (``data/loader.py``, ``_load_single_dataset``) takes ``permutation(len)[:num_samples]`` and, when
``num_samples`` exceeds the dataset, adds ``choice(len, rest)`` (with replacement), then cuts to ``max_samples``.
tunekit draws the same way from ``numpy.random.default_rng(seed)``, so the expected indexes below are computed
with numpy from the run's seed, and the records are followed by their ``_source`` ("file, record i").
"""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import alpaca_records, base_config, train_rows, write_dataset

SIZE = 12


def _cfg(model: Path, data_dir: Path, out: Path, **opts):
    from tunekit.config import load_config

    return load_config(None, base_config(model, data_dir, out, **opts))


def _prepare(cfg):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    return prepare_datasets(cfg, load_tokenizer(cfg), cfg.stage)


def _ids(ds) -> list[int]:
    """The record index (position in the data file) of every row."""
    return [int(s.rsplit("record ", 1)[1]) for s in ds["_source"]]


def _data(folder: Path, num_samples: int | None, size: int = SIZE) -> Path:
    write_dataset(folder, "toy", alpaca_records(size), {"num_samples": num_samples} if num_samples else None)
    return folder


def _expected(size: int, num_samples: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    picked = list(rng.permutation(size)[:num_samples])
    return [int(i) for i in picked + list(rng.choice(size, max(0, num_samples - size)))]


def test_the_seed_picks_the_records_the_same_on_every_load(tiny_qwen, tmp_path):
    data = _data(tmp_path / "data", 5)
    first = _ids(_prepare(_cfg(tiny_qwen, data, tmp_path / "o", seed=0)).train)
    again = _ids(_prepare(_cfg(tiny_qwen, data, tmp_path / "o", seed=0, overwrite_cache=True)).train)
    other = _ids(_prepare(_cfg(tiny_qwen, data, tmp_path / "o", seed=1)).train)
    assert first == again == _expected(SIZE, 5, 0)
    assert other == _expected(SIZE, 5, 1)
    assert len(set(first)) == 5 and set(first) != set(other)


def test_upsampling_keeps_every_record_once_and_draws_the_rest_with_replacement(tiny_qwen, tmp_path):
    """num_samples 29 of 12 (over 2x): 29 rows; the first 12 are each record once, the other 17 drawn again."""
    data = _data(tmp_path / "data", 29)
    ids = _ids(_prepare(_cfg(tiny_qwen, data, tmp_path / "o", seed=3)).train)
    assert len(ids) == 29 and ids == _expected(SIZE, 29, 3)
    assert sorted(ids[:SIZE]) == list(range(SIZE))  # every original record appears
    assert sum(Counter(ids).values()) == 29 and max(Counter(ids).values()) >= 2


def test_num_samples_comes_before_max_samples_and_the_val_size_split(tiny_qwen, tmp_path):
    data = _data(tmp_path / "data", 8)
    picked = _expected(SIZE, 8, 0)
    cut = _prepare(_cfg(tiny_qwen, data, tmp_path / "o", max_samples=3))
    assert _ids(cut.train) == picked[:3] and cut.reports[0].records == 3
    split = _prepare(_cfg(tiny_qwen, data, tmp_path / "o", val_size=0.25))
    assert len(split.train) == 6 and len(split.eval) == 2
    assert sorted(_ids(split.train) + _ids(split.eval)) == sorted(picked)


def test_the_report_says_what_was_sampled(tiny_qwen, tmp_path):
    from rich.console import Console

    from tunekit.data.report import print_reports

    down = _prepare(_cfg(tiny_qwen, _data(tmp_path / "d1", 5), tmp_path / "o")).reports[0]
    up = _prepare(_cfg(tiny_qwen, _data(tmp_path / "d2", 20), tmp_path / "o")).reports[0]
    plain = _prepare(_cfg(tiny_qwen, _data(tmp_path / "d3", None), tmp_path / "o")).reports[0]
    assert down.sampled == "dataset toy: sampled 5 of 12 records (num_samples, seed-shuffled)"
    assert up.sampled == (
        "dataset toy: sampled 20 of 12 records (num_samples, seed-shuffled); "
        "upsampled: every record once, 8 drawn again at random"
    )
    assert plain.sampled is None and plain.records == SIZE
    assert (down.records, down.kept, up.records, up.kept) == (5, 5, 20, 20)
    out = io.StringIO()
    print_reports([down, up], 64, console=Console(file=out, width=300))
    assert f"  {down.sampled}\n" in out.getvalue() and f"  {up.sampled}\n" in out.getvalue()


def test_a_changed_num_samples_or_seed_is_not_served_from_the_cache(tiny_qwen, tmp_path):
    from tunekit.errors import DataError

    data = _data(tmp_path / "data", 5)
    assert len(_prepare(_cfg(tiny_qwen, data, tmp_path / "o")).train) == 5
    _data(data, 7)  # the same file, the entry changed
    assert _ids(_prepare(_cfg(tiny_qwen, data, tmp_path / "o")).train) == _expected(SIZE, 7, 0)
    assert _ids(_prepare(_cfg(tiny_qwen, data, tmp_path / "o", seed=4)).train) == _expected(SIZE, 7, 4)

    folder = tmp_path / "tok"  # tokenized_path: saved with num_samples 7, then asked for 9
    saved = _prepare(_cfg(tiny_qwen, data, tmp_path / "o", tokenized_path=str(folder)))
    meta = json.loads((folder / "tunekit_tokenized.json").read_text())
    assert meta["depends"]["num_samples"] == {"toy": [7, 0]} and len(saved.train) == 7
    _data(data, 9)
    with pytest.raises(DataError) as err:
        _prepare(_cfg(tiny_qwen, data, tmp_path / "o", tokenized_path=str(folder)))
    assert str(err.value).startswith(
        f"tokenized_path {folder} was tokenized with num_samples = {{'toy': [7, 0]}}, but this config gives "
        f"num_samples = {{'toy': [9, 0]}}: its rows do not fit this run."
    )


def test_predict_reads_the_sampled_records(tmp_path):
    from tunekit.config import load_config
    from tunekit.infer.predict import load_samples

    data = _data(tmp_path / "data", 4)
    cfg = load_config(None, base_config(tmp_path / "no-model", data, tmp_path / "o", seed=2))
    ids = [int(s["where"].rsplit("record ", 1)[1]) for s in load_samples(cfg)]
    assert ids == _expected(SIZE, 4, 2)


def test_a_two_step_run_trains_on_exactly_num_samples_rows(tiny_qwen, tmp_path):
    """24 records, num_samples 6, batch 3, one epoch: 2 optimizer steps (the whole dataset would give 8)."""
    from tunekit.config import load_config
    from tunekit.flow import run_train

    data = _data(tmp_path / "data", 6, size=24)
    out = tmp_path / "out"
    opts = dict(per_device_train_batch_size=3, max_steps=-1, num_train_epochs=1.0)
    run_train(load_config(None, base_config(tiny_qwen, data, out, **opts)))
    assert [(row["step"], row["total_steps"]) for row in train_rows(out)] == [(1, 2), (2, 2)]
    (report,) = json.loads((out / "preprocessing_report.json").read_text())
    assert (report["records"], report["kept"]) == (6, 6)
    assert report["sampled"] == "dataset toy: sampled 6 of 24 records (num_samples, seed-shuffled)"
