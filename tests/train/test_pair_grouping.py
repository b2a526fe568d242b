"""``group_within_step`` for dpo / rm (train/pair_grouping.py): an optimizer step's pairs re-dealt by length.

Bounds of the run comparisons (float64, ``dtype: float64``): regrouping changes only reduction orders (other padded
widths, other micro-batch order), so the trained weights agree to ``FLOAT64_WEIGHT_TOL`` (tests/tolerances.py: a few
Adam steps along two summation orders in float64), seven orders below what a pair in the wrong step or a chosen row
paired with another pair's rejected row does (~lr = 1e-2). The logged loss is the Trainer's float32 sum over the 2
micro-batches of a step: two orders of 2 terms of at most ``max loss`` differ by ``sum_order_bound(2, 2 * max loss)``.
"""

from __future__ import annotations

import random

import pytest
import torch

from tests.helpers import base_config, write_dataset
from tests.stage_helpers import PREF_COLUMNS, pair_stage_trainer, random_words, run_losses_and_weights
from tests.tolerances import FLOAT64_WEIGHT_TOL, sum_order_bound
from tunekit.config import load_config
from tunekit.train.batching import PairCollator
from tunekit.train.pair_grouping import regroup_pairs


def _pair(i: int, chosen: int, rejected: int) -> dict:
    """Pair ``i``: chosen ids 100*i+1.. (``chosen`` tokens), rejected ids 100*i+51.., the first
    token a prompt token."""
    c = list(range(100 * i + 1, 100 * i + 1 + chosen))
    r = list(range(100 * i + 51, 100 * i + 51 + rejected))
    return {
        "chosen_input_ids": c,
        "chosen_labels": [-100] + c[1:],
        "rejected_input_ids": r,
        "rejected_labels": [-100] + r[1:],
        "ref_chosen_logps": -float(i) - 0.25,
        "ref_rejected_logps": -float(i) - 0.75,
    }


def _window(lengths, size=2, ref=True):
    collate = PairCollator(pad_token_id=0, pad_to_multiple_of=8)
    pairs = [_pair(i, c, r) for i, (c, r) in enumerate(lengths)]
    if not ref:
        pairs = [{k: v for k, v in p.items() if not k.startswith("ref_")} for p in pairs]
    return [collate(pairs[i : i + size]) for i in range(0, len(pairs), size)]


def _rows(batch) -> list[list[int]]:
    return [batch["input_ids"][i, : int(n)].tolist() for i, n in enumerate(batch["attention_mask"].sum(1))]


def test_a_window_of_two_batches_is_dealt_by_pair_length_with_its_reference_log_probs():
    # pair lengths (longer answer): 3, 20, 12, 9 -> sorted 20 (pair 1), 12 (pair 2), 9 (pair 3), 3 (pair 0)
    before = _window([(3, 2), (5, 20), (12, 4), (9, 9)])
    assert [tuple(b["input_ids"].shape) for b in before] == [(4, 24), (4, 16)]  # 160 slots for 64 real tokens
    after = regroup_pairs(before, pad_token_id=0, pad_to_multiple_of=8)
    assert [tuple(b["input_ids"].shape) for b in after] == [(4, 24), (4, 16)]  # widths 20 -> 24 and 9 -> 16
    first, second = after
    p = [_pair(i, c, r) for i, (c, r) in enumerate([(3, 2), (5, 20), (12, 4), (9, 9)])]
    # chosen 0..B-1, then rejected 0..B-1, in each new batch
    assert _rows(first) == [
        p[1]["chosen_input_ids"],
        p[2]["chosen_input_ids"],
        p[1]["rejected_input_ids"],
        p[2]["rejected_input_ids"],
    ]
    assert _rows(second) == [
        p[3]["chosen_input_ids"],
        p[0]["chosen_input_ids"],
        p[3]["rejected_input_ids"],
        p[0]["rejected_input_ids"],
    ]
    assert first["ref_logps"].tolist() == [-1.25, -2.25, -1.75, -2.75]
    assert second["ref_logps"].tolist() == [-3.25, -0.25, -3.75, -0.75]
    assert first["ref_logps"].dtype == before[0]["ref_logps"].dtype
    for b in after:  # right padding with the collator's values, labels kept with their rows
        pad = b["attention_mask"] == 0
        assert (b["input_ids"][pad] == 0).all() and (b["token_labels"][pad] == -100).all()
        assert (b["token_labels"][~pad] == torch.where(b["input_ids"] % 50 == 1, -100, b["input_ids"])[~pad]).all()
    assert set(first) == set(before[0])


def test_pairs_without_reference_log_probs_and_ties_keep_their_order():
    before = _window([(4, 4), (9, 2), (2, 9), (4, 1)], ref=False)
    after = regroup_pairs(before, pad_token_id=0, pad_to_multiple_of=1)
    assert "ref_logps" not in after[0]
    # lengths 4, 9, 9, 4: the tie 9/9 keeps pair 1 before pair 2, the tie 4/4 pair 0 before pair 3; widths unrounded
    assert [tuple(b["input_ids"].shape) for b in after] == [(4, 9), (4, 4)]
    assert [r[0] for r in _rows(after[0])] == [101, 201, 151, 251] and [r[0] for r in _rows(after[1])] == [
        1,
        301,
        51,
        351,
    ]


def test_unequal_sizes_and_other_batches_pass_through():
    uneven = _window([(3, 2), (5, 20), (12, 4)])  # 2 pairs + 1 pair: the last window of an epoch
    assert [b["input_ids"].shape[0] for b in uneven] == [4, 2]
    assert regroup_pairs(uneven, 0) is uneven
    kto_like = [dict(b, kl_input_ids=b["input_ids"]) for b in _window([(3, 2), (5, 20), (12, 4), (9, 9)])]
    assert regroup_pairs(kto_like, 0) is kto_like
    left = _window([(3, 2), (5, 20), (12, 4), (9, 9)])
    for b in left:
        b["attention_mask"] = b["attention_mask"].flip(1)
    assert regroup_pairs(left, 0) is left


# ---- training runs --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pair_data(tmp_path_factory):
    """Pairs whose answers are 1-2 or 30-40 words long, so a sampler's window mixes short and long pairs."""
    folder = tmp_path_factory.mktemp("pairs")
    rng = random.Random(5)
    pairs = []
    for i in range(16):
        lo, hi = (1, 2) if i % 2 else (30, 40)
        pairs.append(
            {
                "instruction": "Describe " + random_words(rng, 1, 3),
                "input": "",
                "chosen": random_words(rng, lo, hi) + " 7 7",
                "rejected": random_words(rng, lo, hi) + " 3 3",
            }
        )
    write_dataset(folder, "pairs", pairs, {"ranking": True, "columns": PREF_COLUMNS})
    return folder


def _cfg(model, data_dir, out, stage, **overrides):
    return load_config(
        None,
        base_config(
            model,
            data_dir,
            out,
            stage=stage,
            dataset="pairs",
            dtype="float64",
            gradient_checkpointing=False,
            cutoff_len=256,
            per_device_train_batch_size=2,
            gradient_accumulation_steps=2,
            max_steps=2,
            learning_rate=1e-2,
            **overrides,
        ),
    )


def _padded_slots(cfg) -> tuple[int, int]:
    """Model input slots of the first 2 windows as the trainer forms them (its DataLoader + get_batch_samples)."""
    trainer = pair_stage_trainer(cfg)
    batches = iter(trainer.get_train_dataloader())
    slots = real = 0
    for _ in range(2):
        window, _ = trainer.get_batch_samples(batches, 2, trainer.args.device)
        slots += sum(b["input_ids"].numel() for b in window)
        real += sum(int(b["attention_mask"].sum()) for b in window)
    return slots, real


@pytest.mark.parametrize(
    "stage, extra", [("dpo", {"pref_ftx": 0.3}), ("dpo", {"precompute_ref_log_probs": True}), ("rm", {})]
)
def test_regrouped_training_is_the_same_with_less_padding(tiny_qwen, pair_data, tmp_path, stage, extra):
    results, slots = {}, {}
    for flag in (True, False):
        cfg = _cfg(tiny_qwen, pair_data, tmp_path / f"{stage}-{flag}", stage, group_within_step=flag, **extra)
        slots[flag] = _padded_slots(cfg)
        results[flag] = run_losses_and_weights(cfg)
    (l_on, w_on), (l_off, w_off) = results[True], results[False]
    assert slots[True][1] == slots[False][1]  # the same real tokens in the two steps
    assert slots[True][0] < slots[False][0], slots  # and fewer padded slots
    assert w_on.keys() == w_off.keys() and all(t.dtype == torch.float64 for t in w_on.values())
    assert max(w.abs().max().item() for k, w in w_on.items() if "lora_B" in k) > 1e-3  # training moved the weights
    assert max((w_on[k] - w_off[k]).abs().max().item() for k in w_on) <= FLOAT64_WEIGHT_TOL
    assert len(l_on) == len(l_off) == 2
    assert max(abs(a - b) for a, b in zip(l_on, l_off)) <= sum_order_bound(2, 2 * max(l_on)), (l_on, l_off)


def test_data_stats_names_the_regrouped_mode_for_dpo_and_rm_but_not_kto(tiny_qwen, pair_data, tmp_path):
    from tunekit.plan.batching import batching_stats

    table = {"dataset": ["pairs"] * 8, "total_len": [30, 200, 40, 180, 35, 190, 45, 170]}
    configured, offered = {}, {}
    for stage in ("dpo", "rm", "kto"):
        for flag in (True, False):
            cfg = _cfg(tiny_qwen, pair_data, tmp_path / stage, stage, group_within_step=flag)
            stats = batching_stats(table, cfg)
            configured[stage, flag] = stats["configured"]
            offered[stage] = "padded + group_within_step" in stats["modes"]
    assert offered == {"dpo": True, "rm": True, "kto": False}  # a mode kto cannot run is not shown for it
    assert configured == {
        ("dpo", True): "padded + group_within_step",
        ("rm", True): "padded + group_within_step",
        ("kto", True): "padded",
        ("dpo", False): "padded",
        ("rm", False): "padded",
        ("kto", False): "padded",
    }
