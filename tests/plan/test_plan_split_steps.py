"""``tunekit data stats`` and ``tunekit plan`` count steps on the split that trains (``val_size`` held out), as the run
does: ``prepare_datasets`` splits the tokenized rows, the HF Trainer steps over them (``plan_steps`` equals the
Trainer: tests/plan/test_plan_steps.py)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import alpaca_records, base_config, write_dataset
from tunekit.config import load_config

SAMPLES, VAL_SIZE, BATCH, ACCUM, WORLD = 30, 0.2, 2, 2, 2


@pytest.fixture()
def cfg_and_train_rows(tiny_qwen, tmp_path):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    write_dataset(tmp_path / "data", "toy", alpaca_records(SAMPLES, seed=3))
    options = base_config(
        tiny_qwen,
        tmp_path / "data",
        tmp_path / "out",
        val_size=VAL_SIZE,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUM,
        max_steps=-1,
        num_train_epochs=1.0,
    )
    cfg = load_config(None, options)
    data = prepare_datasets(cfg, load_tokenizer(cfg))
    return options, len(data.train)


def test_data_stats_and_plan_count_the_training_split(cfg_and_train_rows, monkeypatch, capsys):
    from tunekit.cli.main import main
    from tunekit.plan import make_plan
    from tunekit.train.steps import plan_steps

    options, train_rows = cfg_and_train_rows
    assert train_rows == SAMPLES - int(VAL_SIZE * SAMPLES)  # 24 of 30
    trained = plan_steps(train_rows, BATCH, ACCUM, WORLD, 1.0).steps_per_epoch  # what the run steps: 3 (all 30: 4)
    assert plan_steps(SAMPLES, BATCH, ACCUM, WORLD, 1.0).steps_per_epoch != trained  # the case tells them apart

    plan = make_plan(load_config(None, options), gpus=WORLD)
    assert (plan.train_samples, plan.steps_per_epoch) == (train_rows, trained)
    padded = plan.batching["modes"]["padded"]
    assert padded["steps_per_epoch"] == trained and padded["rows"] == train_rows

    monkeypatch.setenv("NPROC_PER_NODE", str(WORLD))  # data stats deals the batches to torchrun's ranks
    args = ["data", "stats", *(f"{k}={v}" for k, v in options.items() if v is not None), "--json"]
    assert main(args) == 0
    batching = json.loads(capsys.readouterr().out)["batching"]
    assert batching["modes"][batching["configured"]]["steps_per_epoch"] == trained
    assert batching["modes"]["padded"]["steps_per_epoch"] == trained
    assert (batching["world_size"], batching["val_size"]) == (WORLD, VAL_SIZE)
    assert all(m["rows"] == train_rows for k, m in batching["modes"].items() if k != "packing")
