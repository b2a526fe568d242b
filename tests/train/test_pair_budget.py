"""``max_tokens_per_batch`` for dpo and rm (train/token_budget.py): a pair is the unit and costs both its sequences."""

from __future__ import annotations

import math
import random

import pytest

from tests.helpers import base_config, train_rows, write_dataset
from tests.stage_helpers import PREF_COLUMNS, random_words
from tunekit.config import load_config
from tunekit.errors import ConfigError
from tunekit.train.batching import PaddingFreePairCollator, PairCollator
from tunekit.train.token_budget import batch_cost, budget_batches, dataset_lengths


def _pairs(lengths):
    return [
        {
            "chosen_input_ids": [5] * c,
            "chosen_labels": [-100] + [5] * (c - 1),
            "rejected_input_ids": [6] * r,
            "rejected_labels": [-100] + [6] * (r - 1),
        }
        for c, r in lengths
    ]


def test_padded_pair_batches_by_hand():
    # pairs (chosen, rejected): longer rows 30, 9, 17, 12, 3 -> sorted 30, 17, 12, 9, 3; budget 140, pad to 8:
    # [0]: 2 x 32 = 64, + pair 2: 2 x 2 x 32 = 128, + pair 3: 2 x 3 x 32 = 192 > 140 -> close; [3, 1]: 2 x 2 x 16 = 64,
    # + pair 4: 2 x 3 x 16 = 96 -> [3, 1, 4]
    lengths = [(30, 4), (2, 9), (17, 17), (5, 12), (3, 1)]
    plan = budget_batches(lengths, 140, padding_free=False, pad_to=8)
    assert plan.batches == [[0, 2], [3, 1, 4]] and plan.oversized == []
    collate = PairCollator(pad_token_id=0, pad_to_multiple_of=8)
    pairs = _pairs(lengths)
    sizes = [collate([pairs[i] for i in b])["input_ids"].numel() for b in plan.batches]
    assert sizes == [128, 96] == [batch_cost([lengths[i] for i in b], False, 8) for b in plan.batches]
    # one sequence per sample would have put 3 pairs' worth of tokens in the first batch: the pair counts twice
    assert budget_batches([max(x) for x in lengths], 140, padding_free=False, pad_to=8).batches[0] == [0, 2, 3, 1]


def test_pair_batches_never_exceed_the_budget_and_keep_both_answers_together():
    rng = random.Random(0)
    lengths = [(rng.randint(3, 60), rng.randint(3, 60)) for _ in range(200)]
    pairs = _pairs(lengths)
    for padding_free, collate in (
        (False, PairCollator(pad_token_id=0, pad_to_multiple_of=8)),
        (True, PaddingFreePairCollator()),
    ):
        plan = budget_batches(lengths, 256, padding_free=padding_free, pad_to=1 if padding_free else 8, seed=3)
        assert sorted(i for b in plan.batches for i in b) == list(range(200)) and not plan.oversized
        for b in plan.batches:
            batch = collate([pairs[i] for i in b])
            assert batch["input_ids"].numel() <= 256, (padding_free, b)
            if padding_free:  # chosen 0..B-1 then rejected 0..B-1 of the same pairs, in one row
                assert batch["cu_seqlens"].diff().tolist() == [lengths[i][0] for i in b] + [lengths[i][1] for i in b]
            else:
                n = batch["attention_mask"].sum(1).tolist()
                assert n == [lengths[i][0] for i in b] + [lengths[i][1] for i in b]
        # greedy filling: each batch closed only because the next pair would have taken it over the budget
        pad_to = 1 if padding_free else 8
        for b, nxt in zip(plan.batches, plan.batches[1:]):
            assert batch_cost([lengths[i] for i in b + nxt[:1]], padding_free, pad_to) > 256


def test_dataset_lengths_of_a_pair_dataset_are_both_sequences():
    from datasets import Dataset

    ds = Dataset.from_list(
        [
            {**p, "length": max(len(p["chosen_input_ids"]), len(p["rejected_input_ids"]))}
            for p in _pairs([(4, 7), (9, 2)])
        ]
    )
    assert dataset_lengths(ds) == [[4, 7], [9, 2]]


def test_rules():
    with pytest.raises(
        ConfigError,
        match="max_tokens_per_batch is not supported for stage kto: its KL estimate is taken over each micro-batch",
    ):
        load_config(None, {"stage": "kto", "max_tokens_per_batch": 8192})
    with pytest.raises(
        ConfigError,
        match=r"max_tokens_per_batch 3000 is below 2 x cutoff_len 2048: a dpo pair is two "
        r"sequences .* set max_tokens_per_batch to at least 4096",
    ):
        load_config(None, {"stage": "dpo", "max_tokens_per_batch": 3000})
    with pytest.raises(ConfigError, match="max_tokens_per_batch is for stages sft, pt, dpo and rm"):
        load_config(None, {"stage": "ppo", "max_tokens_per_batch": 4096})
    for stage in ("dpo", "rm"):
        assert load_config(None, {"stage": stage, "max_tokens_per_batch": 4096}).max_tokens_per_batch == 4096


@pytest.fixture(scope="module")
def pair_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pairs")
    rng = random.Random(11)
    pairs = [
        {
            "instruction": "Describe " + random_words(rng, 1, 3),
            "input": "",
            "chosen": random_words(rng, 1, 20) + " 7 7",
            "rejected": random_words(rng, 1, 20) + " 3 3",
        }
        for _ in range(20)
    ]
    write_dataset(folder, "pairs", pairs, {"ranking": True, "columns": PREF_COLUMNS})
    return folder


@pytest.mark.parametrize("stage, padding_free", [("dpo", False), ("dpo", True), ("rm", False)])
def test_a_budget_run_trains_for_exactly_the_planned_steps(tiny_qwen, pair_data, tmp_path, stage, padding_free):
    from tunekit.flow import run_train
    from tunekit.plan.planner import make_plan

    out = tmp_path / "out"
    cfg = load_config(
        None,
        base_config(
            tiny_qwen,
            pair_data,
            out,
            stage=stage,
            dataset="pairs",
            cutoff_len=128,
            max_steps=-1,
            num_train_epochs=1,
            gradient_accumulation_steps=2,
            max_tokens_per_batch=400,
            padding_free=padding_free,
            gradient_checkpointing=False,
        ),
    )
    plan = make_plan(cfg)
    by_samples = make_plan(cfg.model_copy(update={"max_tokens_per_batch": None})).total_steps
    run_train(cfg)
    rows = train_rows(out)
    assert rows and all(math.isfinite(r["loss"]) for r in rows)
    assert {r["total_steps"] for r in rows} == {plan.total_steps}
    assert max(r["step"] for r in rows) == plan.total_steps != by_samples, (plan.total_steps, by_samples)
