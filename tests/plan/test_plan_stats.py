"""`tunekit data stats`: percentiles, truncation, recommended cutoff and padding waste (synthetic
lengths, exact values), and the command on a real tokenized dataset."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tunekit.plan.stats import (
    dataset_stats,
    describe,
    packing_waste,
    padding_waste,
    recommend_cutoff,
    round_up,
    truncation,
)


def test_describe_percentiles():
    d = describe(np.arange(1, 1001))
    assert (d["count"], d["min"], d["max"], d["mean"]) == (1000, 1, 1000, 500.5)
    assert (d["p50"], d["p90"], d["p95"], d["p99"]) == (500, 900, 950, 990)


def test_recommended_cutoff_is_smallest_multiple_of_128_covering_p99():
    lengths = np.array([100] * 98 + [300, 5000])
    rec = recommend_cutoff(lengths)
    assert describe(lengths)["p99"] == 300
    assert rec["recommended_cutoff_len"] == 384 and rec["p95_cutoff_len"] == 128
    assert rec["p95_saves_share"] == pytest.approx(1 - 128 / 384, abs=1e-4)
    assert round_up(128) == 128 and round_up(129) == 256 and round_up(3) == 128


def test_truncation_shares():
    t = truncation(np.array([10, 20, 30, 40]), 25)
    assert t["samples_truncated"] == 2 and t["samples_share"] == 0.5
    assert t["tokens_share"] == pytest.approx((5 + 15) / 100)


def test_padding_waste():
    assert padding_waste([64] * 10, batch=4) == 0.0
    # one batch of [10, 30]: padded to 30 -> 60 slots, 40 real
    assert padding_waste([10, 30], batch=2) == pytest.approx(1 - 40 / 60, abs=1e-6)
    assert padding_waste([10, 30], batch=2, pad_to=8) == pytest.approx(1 - 40 / 64, abs=1e-6)
    rng = np.random.default_rng(0)
    lengths = rng.integers(10, 2000, size=4000)
    random_w = padding_waste(lengths, 8)
    grouped_w = padding_waste(lengths, 8, group=True)
    assert grouped_w < random_w / 3 and random_w > 0.3
    assert padding_waste(lengths, 8) == random_w  # fixed seed: reproducible
    assert packing_waste([100, 200, 50], 128) == pytest.approx(1 - 350 / 384, abs=1e-6)  # 350 tokens -> 3 rows
    assert packing_waste([100, 200, 50], 128, chunk=2) == pytest.approx(1 - 350 / (3 * 128 + 128), abs=1e-6)


def test_dataset_stats_per_dataset_and_overall():
    table = {
        "dataset": ["a"] * 3 + ["b"] * 2,
        "prompt_len": [5, 6, 7, 8, 9],
        "response_len": [5, 6, 7, 100, 200],
        "total_len": [10, 12, 14, 108, 209],
        "trainable_len": [5, 6, 7, 100, 200],
    }
    s = dataset_stats(table, cutoff=100, batch=2)
    assert set(s["datasets"]) == {"a", "b"}
    assert s["datasets"]["b"]["max"] == 209 and s["overall"]["count"] == 5
    assert s["overall"]["trainable_tokens"] == 318 and s["overall"]["truncation"]["samples_truncated"] == 2
    assert s["recommended_cutoff_len"] == 256
    for key in ("p50", "p90", "p95", "p99", "max"):
        assert key in s["overall"] and key in s["datasets"]["a"]


def test_data_stats_command(tiny_qwen, tmp_path, capsys):
    from tests.helpers import alpaca_records, write_dataset
    from tunekit.cli.main import main

    write_dataset(tmp_path / "data", "toy", alpaca_records(30, seed=2))
    write_dataset(tmp_path / "data", "toy2", alpaca_records(10, seed=5))
    args = [
        "data",
        "stats",
        f"model_name_or_path={tiny_qwen}",
        "template=qwen",
        "dataset=toy,toy2",
        f"dataset_dir={tmp_path / 'data'}",
        "cutoff_len=32",
    ]
    plot = tmp_path / "cdf.png"
    assert main(args + ["--json", "--plot", str(plot)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert set(stats["datasets"]) == {"toy", "toy2"} and stats["overall"]["count"] == 40
    assert stats["recommended_cutoff_len"] % 128 == 0 and stats["recommended_cutoff_len"] >= stats["overall"]["p99"]
    assert stats["overall"]["trainable_tokens"] < stats["overall"]["total_tokens"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "recommended cutoff_len" in out and "padding waste" in out
