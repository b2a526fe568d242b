"""dpo / rm under 2-rank DDP with ``padding_free: true`` and ``max_tokens_per_batch``, when the budget forms a batch
count the world size does not divide: 3 batches on 2 ranks.

The data are test_pair_weighting's 4 pairs; padding-free a pair costs its two sequences, 256 (the long one, 128 + 128)
and 113, 113, 110 tokens. The budget 256 (the schema's least, 2 x cutoff_len) forms, in the seeded order, three
batches of 1, 1 and 2 pairs. accelerate deals whole batches, batch ``i`` of the epoch's order to rank ``i % 2``, then
cycles back to the first batches so both ranks get ``ceil(3 / 2) = 2`` (train/token_budget.py, ``plan_steps``): the
epoch trains 4 micro-batches, the first batch twice. The run itself says so: each rank records (the helpers of
test_ddp_pair_budget) the pairs of every micro-batch of every optimizer step and the step's pair count it divides by;
the test asserts that this is the documented dealing recomputed from ``budget_batches`` and the sampler's order, that
both ranks divide each step by its pairs over both ranks (the cycled pairs counted again), and that the steps run
are ``tunekit plan``'s (``make_plan``) and ``plan_steps``'.

Two shapes (recorded): dpo, accumulation 1: 2 steps; step 1 rank 0 trains the epoch's first batch (2 short pairs),
rank 1 the second (1 short), step 2 rank 0 the third (the long pair) and rank 1 the FIRST again: 3 + 3 pairs, both
ranks divide by 3 in each step. rm, accumulation 2: 1 step holding the 4 micro-batches, the first batch's 2 pairs
twice in it: both ranks divide by 6 (each of those pairs weighs 2/6, the others 1/6).
The reference is ONE process whose step ``k`` is ONE padding-free micro-batch holding exactly the pairs the two
ranks trained in step ``k`` (``budget_batches`` replaced by those batches, a pair listed twice is trained twice).

Bound: the existing tests' one-step argument (plain SGD, float64: two summation orders of the same per-pair terms,
``sum_order_bound(1e5, lr |g|, FP64_U)``, test_pair_weighting). The 2-step runs keep it: ``constant_with_warmup`` with
1 warmup step makes step 1's learning rate exactly 0, so SGD leaves the weights bit-equal (``w - 0 x g``) and the final
weights are ONE step of step 2's pairs (the step with the cycled batch) from the initial weights, in both runs;
step 1's weighting is checked by its recorded divisor only. Each logged loss is then taken at the initial weights.
Logged loss: as test_ddp_pair_budget (``sum_order_bound(2, 2 l) = 8 u l``); with accumulation 2 each
rank adds two float32 terms: rounding the four micro-batch values (``u Σ |x| = 2 u l``), each rank's sum (``2 u l``)
and the ranks' sum (``2 u l``), halved, plus the one-process value (``u l``) is ``4 u l``, still under it.
(dpo's logged losses are ln 2 in both runs: at the initial weights LoRA's B is 0, the policy is its reference.)
Measured: weights differ by 8.3e-17 (dpo) and 1.2e-16 (rm) against bounds of 2.8e-12 and 3.0e-12; rm's logged loss
equal. Checked broken: a per-rank count (no gather in ``get_batch_samples``) fails the recorded divisor ([2, 1] / [1,
2] per step instead of 3, 3 instead of 6); a per-rank mean (``losses.mean()``) moves the weights by 1.6e-2 (dpo) and
0.26 (rm). Planned in float32: ``make_plan`` raises KeyError 8 for ``dtype: float64`` (plan/planner.py ``_describe``).
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.distributed_helpers import (
    DDP_PAIR_OPTIONS,
    ddp_pair_batch,
    ddp_pair_result,
    read_pair_records,
    record_pair_batches,
)
from tests.helpers import base_config, train_rows
from tests.stage_helpers import PAIR_LR, lora_step, losses_and_weights, run_losses_and_weights, sgd_step_bound
from tests.tolerances import sum_order_bound
from tunekit.train.token_budget import BudgetBatches, TokenBudgetBatchSampler, budget_batches

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

WORLD = 2
BUDGET = 256  # padding-free pairs of 256, 113, 113, 110 tokens: 3 batches (1, 1 and 2 pairs)
PADDING_FREE = dict(padding_free=True, max_tokens_per_batch=BUDGET, max_steps=-1, num_train_epochs=1)
WARMUP = dict(lr_scheduler_type="constant_with_warmup", warmup_steps=1)  # step 1 at learning rate 0 (module doc)
CASES = {"dpo": 1, "rm": 2}  # stage: gradient accumulation steps


def _options(accumulation: int) -> dict:
    return {**PADDING_FREE, "gradient_accumulation_steps": accumulation, **(WARMUP if accumulation == 1 else {})}


@pytest.fixture(scope="module")
def ddp_runs(tiny_qwen, pair_data, tmp_path_factory):
    """Each case's 2-rank run, both in one batch (tests/distributed_helpers.launch_batch)."""
    runs = {stage: (stage, _options(accumulation)) for stage, accumulation in CASES.items()}
    return ddp_pair_batch(tiny_qwen, pair_data, tmp_path_factory.mktemp("ddp-pairs-pf"), runs)


def _documented_dealing(lengths: list, accumulation: int) -> dict[int, list[list[list[list[int]]]]]:
    """Per rank, per optimizer step, the pairs (their lengths) of each micro-batch as token_budget.py documents them:
    the epoch's batches in the sampler's order, batch ``i`` to rank ``i % world``, cycling back to the first batches
    until every rank has ``ceil(batches / world)``."""
    plan = budget_batches(lengths, BUDGET, True, 1, 0)  # seed 0: base_config's
    order = TokenBudgetBatchSampler(plan, seed=0).order()
    per_rank = math.ceil(len(order) / WORLD)
    dealt = (order * WORLD)[: per_rank * WORLD]
    deal = {}
    for rank in range(WORLD):
        mine = [[list(lengths[i]) for i in plan.batches[b]] for b in dealt[rank::WORLD]]
        deal[rank] = [mine[k : k + accumulation] for k in range(0, per_rank, accumulation)]
    return deal


def _reference(model, data_dir, root, stage, steps: list[list], options: dict, monkeypatch):
    """One process; step ``k`` is one micro-batch of the pairs ``steps[k]`` (pairs named by their lengths). Returns its
    losses, weights, recorded windows and the training set's pair lengths (dataset order)."""
    from tunekit.config import load_config
    from tunekit.train import token_budget
    from tunekit.train.stages.stage_trainer import StageTrainer

    seen = {}

    def fixed_batches(lengths, budget, padding_free, pad_to=1, seed=0):
        seen["lengths"] = [list(x) for x in lengths]
        index = {tuple(x): i for i, x in enumerate(seen["lengths"])}
        return BudgetBatches([[index[tuple(p)] for p in step] for step in steps])

    record = root / "one_record"
    record.mkdir()
    one = {**DDP_PAIR_OPTIONS, **options, "max_tokens_per_batch": 4096, "gradient_accumulation_steps": 1}
    with monkeypatch.context() as patch:
        patch.setattr(token_budget, "budget_batches", fixed_batches)
        patch.setattr(TokenBudgetBatchSampler, "order", lambda self: list(range(len(self.plan.batches))))
        patch.setattr(StageTrainer, "get_batch_samples", record_pair_batches(record))
        losses, weights = run_losses_and_weights(
            load_config(None, base_config(model, data_dir, root / "one", stage=stage, **one))
        )
    return losses, weights, read_pair_records(record), seen["lengths"]


@pytest.mark.parametrize("stage, accumulation", list(CASES.items()))
def test_ddp_padding_free_budget_3_batches_on_2_ranks_weighs_every_trained_pair_the_same(
    tiny_qwen, pair_data, tmp_path, monkeypatch, stage, accumulation, ddp_runs
):
    from tunekit.config import load_config
    from tunekit.plan.planner import make_plan
    from tunekit.train.steps import plan_steps

    options = _options(accumulation)
    out, ddp = ddp_pair_result(ddp_runs[stage])
    assert sorted(ddp) == [0, 1], ddp
    steps = len(ddp[0])
    assert len(ddp[1]) == steps, ddp
    # the step's divisor: its pairs over both ranks, the same on both
    pairs = [[p for r in (0, 1) for mb in ddp[r][k]["micro_batches"] for p in mb] for k in range(steps)]
    assert [[ddp[r][k]["num_items"] for k in range(steps)] for r in (0, 1)] == [[len(p) for p in pairs]] * 2, ddp

    l_one, w_one, one, lengths = _reference(tiny_qwen, pair_data, tmp_path, stage, pairs, options, monkeypatch)
    # what each rank trained is the documented dealing: 3 batches, the first one again on rank 1 (cycling back)
    deal = _documented_dealing(lengths, accumulation)
    assert {r: [w["micro_batches"] for w in ddp[r]] for r in ddp} == deal, (ddp, deal)
    assert ddp[1][-1]["micro_batches"][-1] == ddp[0][0]["micro_batches"][0], ddp  # the cycled batch
    trained = sorted(p for step in pairs for p in step)  # every pair, and the cycled ones again
    assert len({tuple(p) for p in trained}) == 4 and len(trained) == 4 + len(deal[0][0][0]), (trained, deal)
    # the steps run are the plan's (planned in float32: make_plan has no precision name for float64's 8 bytes)
    plan_options = {**DDP_PAIR_OPTIONS, **options, "per_device_train_batch_size": 1, "dtype": "float32"}
    cfg = load_config(None, base_config(tiny_qwen, pair_data, tmp_path / "plan", stage=stage, **plan_options))
    planned = make_plan(cfg, gpus=WORLD)
    assert planned.total_steps == steps == math.ceil(2 / accumulation), (planned, ddp)
    assert plan_steps(len(lengths), 1, accumulation, WORLD, 1.0, -1, num_batches=3).total_steps == steps

    assert [w["num_items"] for w in one[0]] == [len(p) for p in pairs], one  # the reference: the same steps
    assert [sorted(p for mb in w["micro_batches"] for p in mb) for w in one[0]] == [sorted(p) for p in pairs], one
    l_ddp, w_ddp = losses_and_weights(out)
    if accumulation == 1:  # step 1 at learning rate 0 (module doc)
        assert [r["lr"] for r in train_rows(out)] == [0.0, PAIR_LR], train_rows(out)
    assert w_ddp.keys() == w_one.keys() and all(t.dtype == torch.float64 for t in w_one.values())
    bound = sgd_step_bound(w_one)
    assert bound < 1e-9 and lora_step(w_one) > 1e-3  # the step moved the weights
    diff = max((w_ddp[k] - w_one[k]).abs().max().item() for k in w_one)
    print(
        f"{stage} accumulation {accumulation}: pairs per step {[len(p) for p in pairs]}, "
        f"DDP vs one process: weights differ by {diff:.3g} (bound {bound:.3g}), losses {l_ddp} vs {l_one}"
    )
    assert diff <= bound, (diff, bound)
    assert len(l_ddp) == len(l_one) == steps
    assert all(abs(a - b) <= sum_order_bound(2, 2 * abs(b)) for a, b in zip(l_ddp, l_one)), (l_ddp, l_one)
