"""Context parallelism's parts that need no second process: which rows each process draws, what a process's part of a
micro-batch holds, and the refusals before any process starts (the exchange itself and whole runs:
tests/distributed/test_context_parallel.py)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.helpers import alpaca_records, base_config, write_dataset
from tunekit.config import load_config
from tunekit.errors import ConfigError
from tunekit.model.sequence_split import check_sequence_split
from tunekit.train.context_parallel import SequenceGroupSampler
from tunekit.train.engines.ulysses import SequenceGroup, shard_batch
from tunekit.train.preflight import preflight


def test_sampler_gives_a_group_one_block_and_completes_the_last_round():
    sampler = SequenceGroupSampler(rows=5, batch=2, dp=2, cp=2, seed=0, shuffle=False)
    order = list(sampler)
    assert len(order) == len(sampler) == 16  # 2 rounds x 2 groups x 2 processes x 2 rows
    batches = [order[i : i + 2] for i in range(0, 16, 2)]
    # batch j goes to process j % 4 (accelerate): processes 0, 1 (group 0) and 2, 3 (group 1) share their block
    assert batches == [[0, 1], [0, 1], [2, 3], [2, 3], [4, 0], [4, 0], [1, 2], [1, 2]]


def test_sampler_order_is_the_seed_and_the_epoch_alone():
    a, b = SequenceGroupSampler(16, 2, 1, 2, seed=3), SequenceGroupSampler(16, 2, 1, 2, seed=3)
    assert list(a) == list(b)
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first and sorted(set(a)) == list(range(16))
    # one process with the same seed draws the rows in torch's permutation, as accelerate's seeded sampler does
    expected = torch.randperm(16, generator=torch.Generator().manual_seed(3)).tolist()
    assert [row for i in range(0, 32, 4) for row in first[i : i + 2]] == expected


def test_a_process_holds_its_part_with_global_positions_and_labels_shifted_before_the_cut():
    ids = torch.tensor([[11, 12, 13, 14, 15], [21, 22, 23, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    labels = torch.tensor([[-100, 12, 13, 14, 15], [-100, -100, 23, -100, -100]])
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    first, first_labels = shard_batch(batch, SequenceGroup(None, 2, 0), pad_id=0)
    second, second_labels = shard_batch(batch, SequenceGroup(None, 2, 1), pad_id=0)
    assert first["input_ids"].tolist() == [[11, 12, 13], [21, 22, 23]]
    assert second["input_ids"].tolist() == [[14, 15, 0], [0, 0, 0]]  # 5 positions padded to 6
    assert first["position_ids"].tolist() == [[0, 1, 2], [0, 1, 2]]
    assert second["position_ids"].tolist() == [[3, 4, 5], [3, 4, 5]]
    # position 2 predicts token 14, which the other process holds
    assert first_labels.tolist() == [[12, 13, 14], [-100, 23, -100]]
    assert second_labels.tolist() == [[15, -100, -100], [-100, -100, -100]]


def test_a_batch_that_cannot_be_split_is_refused_by_name():
    seq = SequenceGroup(None, 2, 0)
    batch = {"input_ids": torch.ones(1, 4, dtype=torch.long), "labels": torch.ones(1, 4, dtype=torch.long)}
    with pytest.raises(ConfigError) as err:
        shard_batch({**batch, "pixel_values": torch.zeros(1)}, seq, 0)
    assert str(err.value) == (
        "cp_size 2: the micro-batch holds pixel_values, which context parallelism cannot split (it splits the "
        "input_ids, attention_mask and labels of plain padded rows): remove cp_size or what adds them."
    )
    with pytest.raises(ConfigError) as err:
        shard_batch({**batch, "attention_mask": torch.tensor([[0, 1, 1, 1]])}, seq, 0)
    assert "padding before its tokens" in str(err.value)


@pytest.mark.parametrize(
    ("config", "cp", "message"),
    [
        (
            {"num_attention_heads": 4, "num_key_value_heads": 2},
            4,
            "cp_size 4 gives each process 1/4 of the attention heads, but the model has 4 query and 2 key/value "
            "heads: cp_size must divide both (here: 2). Change cp_size (and the processes) or remove it.",
        ),
        (
            {
                "num_attention_heads": 8,
                "num_key_value_heads": 8,
                "layer_types": ["full_attention", "sliding_attention"],
            },
            2,
            "cp_size 2: the model has sliding_attention layers, which mix tokens outside the attention that context "
            "parallelism splits; it covers models whose layers are all full attention. Remove cp_size.",
        ),
        (
            {"model_type": "qwen2_vl", "vision_config": {}, "text_config": {"num_attention_heads": 8}},
            2,
            "cp_size 2: qwen2_vl takes media whose features are placed by token position in the whole sequence; "
            "tunekit's context parallelism splits text-only models. Remove cp_size.",
        ),
    ],
)
def test_models_context_parallelism_cannot_split(config, cp, message):
    with pytest.raises(ConfigError) as err:
        check_sequence_split(cp, config)
    assert str(err.value) == message
    check_sequence_split(1, config)  # cp_size 1: nothing to check
    check_sequence_split(2, {"num_attention_heads": 16, "num_key_value_heads": 8, "layer_types": ["full_attention"]})


def test_preflight_refuses_cp_size_the_processes_do_not_divide(tiny_qwen, tmp_path, monkeypatch):
    for var in ("WORLD_SIZE", "NPROC_PER_NODE", "FORCE_TORCHRUN", "NNODES"):
        monkeypatch.delenv(var, raising=False)
    write_dataset(tmp_path / "data", "toy", alpaca_records(4))
    cfg = load_config(None, base_config(tiny_qwen, tmp_path / "data", tmp_path / "out", cp_size=2))
    with pytest.raises(ConfigError) as err:
        preflight(cfg)
    assert str(err.value) == (
        "cp_size 2 splits each sequence over 2 processes, but this run has 1 process(es): start a multiple of 2 "
        "(FORCE_TORCHRUN=1 with NPROC_PER_NODE, or torchrun --nproc_per_node), or remove cp_size."
    )
    monkeypatch.setenv("FORCE_TORCHRUN", "1")
    monkeypatch.setenv("NPROC_PER_NODE", "2")
    preflight(cfg)  # 2 processes: one sequence group
    heads = json.loads((tiny_qwen / "config.json").read_text())["num_attention_heads"]
    cfg = load_config(None, base_config(tiny_qwen, tmp_path / "data", tmp_path / "out", cp_size=2 * heads))
    monkeypatch.setenv("NPROC_PER_NODE", str(2 * heads))
    with pytest.raises(ConfigError) as err:
        preflight(cfg)
    assert f"cp_size {2 * heads} gives each process 1/{2 * heads} of the attention heads" in str(err.value)
