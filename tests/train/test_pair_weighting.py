"""dpo / rm: every pair of an optimizer step weighs the same, whatever the micro-batch sizes (stage_trainer.py).

The runs: 4 pairs, one long (answers of ~90 words: 128 + 128 tokens at cutoff_len 128) and three short (~55 tokens
per sequence). Padded, ``max_tokens_per_batch`` 384 cannot hold the long pair with another (2 x 2 x 128 = 512) but
holds the three short ones (2 x 3 x 64 = 384): budget batches [long], [short x 3]. Padding-free, 340 cannot hold the
long pair with a short one (256 + ~110) but holds two or three short ones, so the seeded order gives batches of 1 and
2 or 3 pairs. The test reads the sizes from the trainer's own DataLoader, asserts they are unequal, and sets
``gradient_accumulation_steps`` to the batch count with ``max_steps`` 1: the whole dataset is the one optimizer step,
whatever order the budget sampler draws the batches in. The reference run holds the same 4 pairs as ONE micro-batch
(``per_device_train_batch_size`` 4, accumulation 1), so both steps train on the same pairs and differ only in how
they are split: the same data order without steering any sampler.

Bound: plain SGD (``optim: sgd``, no clipping, first step at the full learning rate) makes the weights after one step
``w0 - lr * g``, so two runs differ by ``lr * |g_a - g_b|``. In float64 the two gradients are sums of the same
per-pair terms in other orders: each element is a sum of at most ~1e5 products in this tiny model, so
``lr |g_a - g_b| <= sum_order_bound(1e5, lr |g|, FP64_U)``, about 2e-11 relative; asserted with the largest trained
weight for ``lr |g|`` (LoRA A, the value head: larger than the step, and their own rounding is covered): ~3e-12.
Measured: at most 7e-17. The old weighting (each micro-batch's mean divided by the accumulation count: the long pair
at 1/2, each short one at 1/6, instead of 1/4 each) differs by 9e-3 (padding-free dpo), 2e-2 (dpo + pref_ftx) and
0.19 (rm): a share of the step itself, nine orders above the bound (checked: these three tests fail with it).
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import base_config
from tests.stage_helpers import PAIR_SGD_OPTIONS, lora_step, pair_stage_trainer, run_losses_and_weights, sgd_step_bound
from tests.tolerances import sum_order_bound
from tunekit.config import load_config


def _cfg(model, data_dir, out, stage, **overrides):
    return load_config(None, base_config(model, data_dir, out, stage=stage, **{**PAIR_SGD_OPTIONS, **overrides}))


def _batch_pairs(cfg) -> list[int]:
    """Pairs per micro-batch of one epoch, as the trainer's DataLoader forms them."""
    from tunekit.train.stages.stage_trainer import pair_count

    trainer = pair_stage_trainer(cfg)
    return [pair_count(b) for b in trainer.get_train_dataloader()]


@pytest.mark.parametrize(
    "stage, padding_free, extra", [("dpo", False, {"pref_ftx": 0.3}), ("dpo", True, {}), ("rm", False, {})]
)
def test_unequal_budget_micro_batches_weigh_every_pair_the_same(
    tiny_qwen, pair_data, tmp_path, stage, padding_free, extra
):
    tokens = 340 if padding_free else 384  # module doc
    budget = _cfg(
        tiny_qwen,
        pair_data,
        str(tmp_path / "budget"),
        stage,
        padding_free=padding_free,
        max_tokens_per_batch=tokens,
        **extra,
    )
    sizes = _batch_pairs(budget)
    assert sum(sizes) == 4 and len(set(sizes)) > 1 and sizes.count(1) >= 1, sizes  # the long pair alone: unequal sizes
    if not padding_free:
        assert sorted(sizes) == [1, 3], sizes
    budget = budget.model_copy(update={"gradient_accumulation_steps": len(sizes)})  # all 4 pairs in the one step
    one = _cfg(
        tiny_qwen,
        pair_data,
        str(tmp_path / "one"),
        stage,
        padding_free=padding_free,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        **extra,
    )
    (l_budget, w_budget), (l_one, w_one) = run_losses_and_weights(budget), run_losses_and_weights(one)
    assert w_budget.keys() == w_one.keys() and all(t.dtype == torch.float64 for t in w_one.values())
    bound = sgd_step_bound(w_one)
    assert bound < 1e-9 and lora_step(w_one) > 1e-3  # the step moved the weights
    diff = max((w_budget[k] - w_one[k]).abs().max().item() for k in w_one)
    assert diff <= bound, (diff, bound)
    # the logged step loss: the mean over the 4 pairs, in both runs (float32 accumulation of 2 terms in the budget run)
    assert len(l_budget) == len(l_one) == 1
    assert abs(l_budget[0] - l_one[0]) <= sum_order_bound(2, 2 * abs(l_one[0])), (l_budget, l_one)


def test_equal_micro_batches_are_unchanged_batch_2_x_2_equals_batch_4(tiny_qwen, pair_data, tmp_path):
    """Equal sizes: ``Σ ℓ / (k B)`` is the old mean of micro-batch means ``(1/k) Σ (1/B) Σ ℓ``; the sampler draws the
    same permutation of the 4 pairs for batch 2 x 2 and batch 4 x 1, so both steps hold the same pairs."""
    runs = {}
    for b, k in ((2, 2), (4, 1)):
        runs[b] = run_losses_and_weights(
            _cfg(
                tiny_qwen,
                pair_data,
                str(tmp_path / f"b{b}"),
                "dpo",
                per_device_train_batch_size=b,
                gradient_accumulation_steps=k,
            )
        )
    (l2, w2), (l4, w4) = runs[2], runs[4]
    diff = max((w2[k] - w4[k]).abs().max().item() for k in w4)
    assert lora_step(w4) > 1e-3 and diff <= sgd_step_bound(w4), diff
    assert abs(l2[0] - l4[0]) <= sum_order_bound(2, 2 * abs(l4[0])), (l2, l4)


def test_pair_count_of_padded_and_padding_free_batches():
    from tunekit.train.batching import PaddingFreePairCollator, PairCollator
    from tunekit.train.stages.stage_trainer import pair_count

    pairs = [
        {
            "chosen_input_ids": [5] * c,
            "chosen_labels": [-100] + [5] * (c - 1),
            "rejected_input_ids": [6] * r,
            "rejected_labels": [-100] + [6] * (r - 1),
        }
        for c, r in [(3, 4), (7, 2), (5, 5)]
    ]
    assert pair_count(PairCollator(pad_token_id=0)(pairs)) == 3 == pair_count(PaddingFreePairCollator()(pairs))
    assert pair_count(PaddingFreePairCollator()(pairs[:1])) == 1
