"""Token-budget batching (``max_tokens_per_batch``): micro-batches formed by token count, not sample count.

A micro-batch costs what it puts through the model: with ``padding_free`` the sum of its samples' lengths (one
row, no pads), otherwise ``rows x the longest row`` rounded up to ``pad_to_multiple_of`` (the padded tensor).
:func:`budget_batches` forms the batches ONCE per run, deterministically from the seed:

- padding-free: samples in a seeded random order, each batch filled greedily until the next sample would go over
  the budget (padding costs nothing, so order only decides which samples meet);
- padded: samples sorted by length (longest first, ties by index), filled the same way, so each batch holds
  samples of similar length and little padding (fairseq's ``max_tokens`` batching).

Preference pairs (dpo, rm) are the unit: ``lengths`` is then an ``[N, 2]`` array (the chosen and the rejected
sequence of each pair, :func:`dataset_lengths`), so both answers of a pair always share a micro-batch. A pair costs
both its sequences: padding-free ``len(chosen) + len(rejected)``; padded, a batch of pairs is ``2 x pairs x`` its
longest row rounded up (``PairCollator`` pads all ``2B`` rows to one width), and the pairs are sorted by their longer
row. One sequence per sample (sft, pt) is the ``[N]`` case of the same algorithm. (KTO is refused by the schema:
its KL estimate is a micro-batch-level quantity, and budget batches of unequal sizes would change it.) Every pair of
an optimizer step weighs ``1 / (pairs in the step)`` whatever the micro-batch sizes: dpo/rm divide the sum of the
micro-batch's pair losses by the step's pair count (``stages/stage_trainer.py``; docs/padding-free.md).

A sample whose cost alone is over the budget (the padded width rounded up past it) becomes a batch of its own
and is counted in :attr:`BudgetBatches.oversized` (the run says so). Every epoch then visits the same batches in
an order shuffled by ``seed + epoch``: the batch count per epoch is fixed, so ``train/steps.py`` computes the steps
from the batch count (``plan_steps(num_batches=...)``) exactly as the HF Trainer runs them, and a resumed run skips
exactly the batches it had trained (the Trainer's ``skip_first_batches`` over the same order).

Data parallelism: the DataLoader gets the batch sampler, and accelerate's ``BatchSamplerShard`` (``batch_size is
None``: dynamic batches) deals WHOLE batches to the ranks in turn (batch ``i`` to rank ``i % world``), cycling back
to the first batches so every rank gets ``ceil(batches / world)``: the same rule ``plan_steps`` applies. The batches
dealt again are trained again (3 batches on 2 ranks: the epoch's first batch twice), and dpo/rm count their pairs again
in that step's pair count (tests/distributed/test_ddp_pair_budget_padding_free.py).

The Trainer hook: transformers 5's ``Trainer._get_dataloader`` passes a sampler as ``batch_sampler`` only for its
own ``BatchRebalanceSampler``, so :class:`TokenBudgetMixin` overrides the public ``get_train_dataloader`` (no private
hook; checked against transformers 5.24) and builds the same DataLoader it would, with ``batch_sampler`` instead of
``batch_size``. This module imports no torch at import time (``tunekit plan`` reads :func:`budget_batches`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


def batch_cost(lengths: list, padding_free: bool, pad_to: int = 1) -> int:
    """Tokens a micro-batch of samples of these lengths puts through the model (a sample: a length, or the lengths of
    its sequences, e.g. a pair's ``(chosen, rejected)``)."""
    if not len(lengths):
        return 0
    rows = [list(x) if hasattr(x, "__len__") else [x] for x in lengths]
    if padding_free:
        return int(sum(sum(r) for r in rows))
    longest = max(max(r) for r in rows)
    width = -(-longest // pad_to) * pad_to if pad_to > 1 else longest
    return int(width * sum(len(r) for r in rows))


@dataclass
class BudgetBatches:
    batches: list[list[int]]  # dataset indices per micro-batch, in formation order
    oversized: list[int] = field(default_factory=list)  # samples alone over the budget (each its own batch)

    def __len__(self) -> int:
        return len(self.batches)


def budget_batches(lengths, budget: int, padding_free: bool, pad_to: int = 1, seed: int = 0) -> BudgetBatches:
    """Micro-batches of dataset indices, each costing at most ``budget`` tokens (module docstring). ``lengths``:
    ``[N]`` (one sequence per sample) or ``[N, k]`` (``k`` sequences per sample: a pair's chosen and rejected)."""
    import numpy as np

    if budget < 1:
        raise ValueError("max_tokens_per_batch must be >= 1")
    arr = np.asarray(list(lengths) if not isinstance(lengths, np.ndarray) else lengths, dtype=np.int64)
    if arr.ndim == 2:  # k rows per sample: padding-free a sample costs their sum; padded k rows of the batch's width
        rows, arr = arr.shape[1], (arr.sum(axis=1) if padding_free else arr.max(axis=1, initial=0))
    else:
        rows = 1
    if padding_free:
        order = np.random.default_rng(seed).permutation(len(arr))
    else:
        order = np.lexsort((np.arange(len(arr)), -arr))  # longest first, ties by index
    batches: list[list[int]] = []
    oversized: list[int] = []
    current: list[int] = []
    total = longest = 0
    m = max(1, pad_to)
    for i in order.tolist():
        n = int(arr[i])
        if padding_free:
            cost = total + n
        else:
            width = -(-max(longest, n) // m) * m
            cost = rows * width * (len(current) + 1)
        if current and cost > budget:
            batches.append(current)
            current, total, longest = [], 0, 0
            cost = n if padding_free else rows * (-(-n // m) * m)
        if cost > budget:  # alone over the budget: its own batch
            oversized.append(i)
            batches.append([i])
            continue
        current.append(i)
        total += n
        longest = max(longest, n)
    if current:
        batches.append(current)
    return BudgetBatches(batches, oversized)


class TokenBudgetBatchSampler:
    """A batch sampler over fixed token-budget batches; their order is shuffled per epoch by ``seed + epoch``.

    No ``batch_size`` attribute on purpose: accelerate then treats the batches as dynamic and deals whole batches."""

    def __init__(self, plan: BudgetBatches, seed: int = 0, shuffle: bool = True):
        self.plan = plan
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.plan.batches)

    def order(self) -> list[int]:
        import numpy as np

        n = len(self.plan.batches)
        if not self.shuffle:
            return list(range(n))
        return np.random.default_rng(self.seed + self.epoch).permutation(n).tolist()

    def __iter__(self):
        for b in self.order():
            yield list(self.plan.batches[b])


def dataset_lengths(dataset) -> list:
    """Token length of every row: the ``length`` column the processors write, else ``len(input_ids)``; for preference
    pairs (dpo, rm) the lengths of each pair's two sequences, ``[len(chosen), len(rejected)]``."""
    if "chosen_input_ids" in dataset.column_names:
        return [[len(c), len(r)] for c, r in zip(dataset["chosen_input_ids"], dataset["rejected_input_ids"])]
    if "length" in dataset.column_names:
        return [int(n) for n in dataset["length"]]
    return [len(x) for x in dataset["input_ids"]]


class TokenBudgetMixin:
    """``Trainer.get_train_dataloader`` with a :class:`TokenBudgetBatchSampler` when ``max_tokens_per_batch`` is
    set."""

    def get_train_dataloader(self):
        cfg = getattr(self, "tunekit_config", None)
        budget = getattr(cfg, "max_tokens_per_batch", None) if cfg is not None else None
        if not budget or self.train_dataset is None:
            return super().get_train_dataloader()
        from functools import partial

        from torch.utils.data import DataLoader
        from transformers.trainer_utils import seed_worker

        plan = budget_batches(
            dataset_lengths(self.train_dataset),
            budget,
            cfg.padding_free,
            1 if cfg.padding_free else cfg.pad_to_multiple_of,
            self.args.data_seed or self.args.seed,
        )
        if plan.oversized:
            print(
                f"max_tokens_per_batch {budget}: {len(plan.oversized)} sample(s) alone exceed it once padded to a "
                f"multiple of {cfg.pad_to_multiple_of}; each is its own micro-batch.",
                flush=True,
            )
        sampler = TokenBudgetBatchSampler(plan, seed=self.args.data_seed or self.args.seed)
        params = {
            "batch_sampler": sampler,
            "collate_fn": self.data_collator,
            "num_workers": self.args.dataloader_num_workers,
            "pin_memory": self.args.dataloader_pin_memory,
            "persistent_workers": self.args.dataloader_persistent_workers,
            "worker_init_fn": partial(
                seed_worker, num_workers=self.args.dataloader_num_workers, rank=self.args.process_index
            ),
        }
        if self.args.dataloader_num_workers > 0 and self.args.dataloader_prefetch_factor is not None:
            params["prefetch_factor"] = self.args.dataloader_prefetch_factor
        return self.accelerator.prepare(DataLoader(self.train_dataset, **params))
