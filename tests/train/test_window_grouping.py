"""Regrouping an optimizer step's samples by length (train/window_grouping.py): same rows, same step, less padding."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import base_config, logged_losses, write_dataset
from tests.tolerances import FLOAT64_WEIGHT_TOL, sum_order_bound
from tunekit.config import load_config
from tunekit.data.collator import PaddingCollator
from tunekit.flow import run_train
from tunekit.train.window_grouping import regroup


def _rows(lengths, start=10):
    return [
        {
            "input_ids": list(range(start + i, start + i + n)),
            "labels": [-100] * 2 + list(range(start + i + 2, start + i + n)),
        }
        for i, n in enumerate(lengths)
    ]


def _batches(lengths, size=2):
    collate = PaddingCollator(pad_token_id=0, pad_to_multiple_of=8)
    rows = _rows(lengths)
    return [collate(rows[i : i + size]) for i in range(0, len(rows), size)]


def _padded(batches):
    return sum(b["input_ids"].numel() for b in batches)


def _unpadded_rows(batches):
    out = []
    for b in batches:
        for r in range(b["input_ids"].shape[0]):
            n = int(b["attention_mask"][r].sum())
            out.append((b["input_ids"][r, :n].tolist(), b["labels"][r, :n].tolist()))
    return sorted(out)


def test_docstring_example_same_rows_less_padding():
    before = _batches([412, 61, 95, 388, 230, 70, 150, 140])
    after = regroup(before, pad_token_id=0)
    assert (_padded(before), _padded(after)) == (2384, 1728)
    assert [b["input_ids"].shape for b in after] == [(2, 416), (2, 232), (2, 144), (2, 72)]
    assert _unpadded_rows(after) == _unpadded_rows(before)  # every row kept whole, nothing else added
    for b in after:  # padding is right padding with the collator's values
        pad = b["attention_mask"] == 0
        assert (b["input_ids"][pad] == 0).all() and (b["labels"][pad] == -100).all()

    def trained(batches) -> int:  # what HF's num_items_in_batch counts
        return sum(int((b["labels"][:, 1:] != -100).sum()) for b in batches)

    assert trained(after) == trained(before)


def test_uneven_last_batch_keeps_the_sizes():
    before = _batches([5, 30, 17], size=2)  # sizes 2 and 1
    after = regroup(before, pad_token_id=0)
    assert [b["input_ids"].shape[0] for b in after] == [2, 1] and _unpadded_rows(after) == _unpadded_rows(before)
    assert after[0]["attention_mask"].sum(1).tolist() == [30, 17]


def test_other_batches_pass_through():
    packed = [
        {
            "input_ids": torch.ones(1, 8, dtype=torch.long),
            "position_ids": torch.zeros(1, 8, dtype=torch.long),
            "labels": torch.ones(1, 8, dtype=torch.long),
        }
    ] * 2
    assert regroup(packed, 0) is packed
    left = _batches([3, 9, 4, 8])
    for b in left:
        b["attention_mask"] = b["attention_mask"].flip(1)
    assert regroup(left, 0) is left


@pytest.fixture(scope="module")
def varied_data(tmp_path_factory):
    import random

    rng = random.Random(7)
    folder = tmp_path_factory.mktemp("varied")
    records = [
        {
            "instruction": "Repeat: " + " ".join(str(rng.randint(0, 99)) for _ in range(rng.randint(1, 3))),
            "input": "",
            "output": " ".join(str(rng.randint(0, 99)) for _ in range(rng.choice([1, 2, 12, 25]))),
        }
        for _ in range(32)
    ]
    write_dataset(folder, "toy", records)
    return folder


def test_training_with_and_without_regrouping_is_the_same(tiny_qwen, varied_data, tmp_path):
    results = {}
    for flag in (True, False):
        out = tmp_path / f"o-{flag}"
        run_train(
            load_config(
                None,
                base_config(
                    tiny_qwen,
                    varied_data,
                    out,
                    finetuning_type="lora",
                    per_device_train_batch_size=2,
                    gradient_accumulation_steps=4,
                    max_steps=3,
                    learning_rate=1e-2,
                    group_within_step=flag,
                    gradient_checkpointing=False,
                    dtype="float64",
                ),
            )
        )
        losses = logged_losses(out)
        results[flag] = (losses, load_file(out / "adapter_model.safetensors"))
    (l_on, w_on), (l_off, w_off) = results[True], results[False]
    # Regrouping changes only the order of the sums (padding shapes, micro-batch order). In float32, Adam turns those
    # last-bit differences into steps of up to lr for gradients at the rounding floor (2.3e-5 on one machine, 1.6e-6 on
    # another), so the runs are float64 and the weights must agree to FLOAT64_WEIGHT_TOL (measured 2.3e-14), far
    # below what a sample moved to another step would do (~lr = 1e-2).
    assert all(t.dtype == torch.float64 for t in w_on.values())
    assert max((w_on[k] - w_off[k]).abs().max().item() for k in w_on) <= FLOAT64_WEIGHT_TOL
    # The logged loss is accumulated over the 4 micro-batches in a float32 tensor by the Trainer: two orders of 4 terms
    # of ~7.6 each differ by at most sum_order_bound(4, 4 * 7.6) = 1.8e-5 (measured 9.5e-7).
    assert len(l_on) == 3
    assert max(abs(a - b) for a, b in zip(l_on, l_off)) <= sum_order_bound(4, 4 * max(l_on)), (l_on, l_off)
