"""dpo / rm under DDP with ``max_tokens_per_batch``: the two ranks' micro-batches hold different pair counts in the
same optimizer step, and every pair still weighs ``1 / (pairs of the step, all ranks)`` (stage_trainer.py).

The data and budget are test_pair_weighting's: 4 pairs, one long and three short, padded budget 384 forms the
batches [long] and [short x 3]. Two ranks, accumulation 1, ``max_steps`` 1: accelerate deals whole batches to the
ranks in turn (train/token_budget.py), so the step is rank A's one pair and rank B's three. The run itself says
so: each rank records, from the trainer's own ``get_batch_samples``, the pairs of each micro-batch it trained
(their chosen / rejected lengths) and the step's pair count it divides by; the test asserts counts 1 and 3, a
divisor of 4 on both ranks, and that the union of the two ranks' pairs is the reference run's batch. The
reference is ONE process holding the same 4 pairs in one micro-batch (batch 4, no budget).

Why the weighting matters here: each rank's loss is ``Σ_rank ℓ / 4 x 2`` (the count summed over the ranks, x the
process count that DDP's gradient mean undoes), so the step is ``Σ ℓ / 4``. A per-rank mean (``Σ_rank ℓ / pairs of
the rank``, averaged by DDP) weighs the long pair 1/2 and each short one 1/6 instead of 1/4.

Bound: as test_pair_weighting's docstring (plain SGD, float64, one step: the runs differ by ``lr |g_a - g_b|``, two
summation orders of the same per-pair terms, ``sum_order_bound(1e5, lr |g|, FP64_U)`` with the largest trained
weight for ``lr |g|``). The ranks add one more term order (the all-reduce); the x 2 and DDP's / 2 are exact in
binary. Logged loss: the Trainer accumulates each rank's float64 loss into a float32 ``tr_loss`` and logs the mean
over the ranks; rounding both ranks' values (``u Σ |x_r| = 2 u ℓ``, the terms are positive), their sum (``u ℓ``) and
the one-process value (``u ℓ``) stays under ``sum_order_bound(2, 2 ℓ) = 8 u ℓ``.
Measured: weights differ by 8e-17 (dpo) and 1.3e-16 (rm) against bounds of 2.8e-12 and 4.3e-12. Checked broken:
a per-rank mean (``losses.mean()`` per rank, DDP's average of the two) moves them by 2.3e-2 (dpo) and 0.19 (rm);
a per-rank count (no gather) fails the recorded divisor (1 and 3 instead of 4).
"""

from __future__ import annotations

import pytest
import torch

from tests.distributed_helpers import (
    DDP_PAIR_OPTIONS,
    ddp_pair_batch,
    ddp_pair_result,
    read_pair_records,
    record_pair_batches,
)
from tests.helpers import base_config
from tests.stage_helpers import lora_step, losses_and_weights, run_losses_and_weights, sgd_step_bound
from tests.tolerances import sum_order_bound

pytestmark = [pytest.mark.slow, pytest.mark.distributed]
STAGES = ["dpo", "rm"]


@pytest.fixture(scope="module")
def ddp_runs(tiny_qwen, pair_data, tmp_path_factory):
    """Each stage's 2-rank run, both in one batch (tests/distributed_helpers.launch_batch)."""
    return ddp_pair_batch(tiny_qwen, pair_data, tmp_path_factory.mktemp("ddp-pairs"), {s: (s, {}) for s in STAGES})


@pytest.mark.parametrize("stage", STAGES)
def test_ddp_ranks_with_unequal_pair_counts_weigh_every_pair_of_the_step_the_same(
    tiny_qwen, pair_data, tmp_path, monkeypatch, stage, ddp_runs
):
    from tunekit.config import load_config
    from tunekit.train.stages.stage_trainer import StageTrainer

    out, ddp = ddp_pair_result(ddp_runs[stage])
    assert sorted(ddp) == [0, 1], ddp
    assert all(len(windows) == 1 and len(windows[0]["micro_batches"]) == 1 for windows in ddp.values()), ddp  # 1 step
    counts = sorted(len(ddp[r][0]["micro_batches"][0]) for r in ddp)
    assert counts == [1, 3], ddp  # unequal pair counts on the two ranks, in the one step
    assert [ddp[r][0]["num_items"] for r in ddp] == [4, 4], ddp  # both divide by the step's pairs over both ranks

    one_dir = tmp_path / "one_record"
    one_dir.mkdir()
    monkeypatch.setattr(StageTrainer, "get_batch_samples", record_pair_batches(one_dir))
    one_cfg = load_config(
        None,
        base_config(
            tiny_qwen, pair_data, tmp_path / "one", stage=stage, per_device_train_batch_size=4, **DDP_PAIR_OPTIONS
        ),
    )
    l_one, w_one = run_losses_and_weights(one_cfg)
    one = read_pair_records(one_dir)
    assert list(one) == [0] and len(one[0]) == 1 and one[0][0]["num_items"] == 4, one
    ddp_pairs = sorted(p for r in ddp for p in ddp[r][0]["micro_batches"][0])
    assert ddp_pairs == sorted(one[0][0]["micro_batches"][0]) and len({tuple(p) for p in ddp_pairs}) == 4, (ddp, one)

    l_ddp, w_ddp = losses_and_weights(out)
    assert w_ddp.keys() == w_one.keys() and all(t.dtype == torch.float64 for t in w_one.values())
    bound = sgd_step_bound(w_one)
    assert bound < 1e-9 and lora_step(w_one) > 1e-3  # the step moved the weights
    diff = max((w_ddp[k] - w_one[k]).abs().max().item() for k in w_one)
    print(f"{stage}: DDP vs one process: weights differ by {diff:.3g} (bound {bound:.3g})")
    assert diff <= bound, (diff, bound)
    assert len(l_ddp) == len(l_one) == 1
    assert abs(l_ddp[0] - l_one[0]) <= sum_order_bound(2, 2 * abs(l_one[0])), (l_ddp, l_one)
