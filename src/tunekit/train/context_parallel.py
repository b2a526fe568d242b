"""The trainer's side of context parallelism (``cp_size`` > 1; the exchange is :mod:`tunekit.train.engines.ulysses`).

Three things change when the processes of a sequence group share each micro-batch:

- **Which rows each process draws** (:class:`SequenceGroupSampler`): accelerate deals the dataloader's batches to
  the processes in turn, so the sampler writes each batch ``cp_size`` times in a row; the processes of a group then
  draw the same rows, the groups different ones. Global batch = per-device batch x accumulation x processes /
  cp_size, and the order comes from ``data_seed`` (else ``seed``) and the epoch alone, the same on every process.
- **What the step's loss is divided by** (:meth:`ContextParallelMixin.get_batch_samples`): the trained tokens of the
  step over all processes, each group's rows counted once (and so ``num_input_tokens_seen``:
  ``TunekitTrainer._track_num_input_tokens``).
- **The loss** (:meth:`ContextParallelMixin.compute_loss`): each process runs its part of the positions
  (:func:`~tunekit.train.engines.ulysses.shard_batch`) with its targets shifted before the cut (``shift_labels``)
  through the run's trained-token loss (``token_loss.py``: the head as the run decided; Liger's fused loss is off, the
  model's forward never sees labels): the sum over its targets divided by the step's count, times the processes (DDP
  and FSDP2 average the gradients over all of them). The sum over a group's processes is then exactly the
  micro-batch's loss on one process.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data import Sampler

from .engines import ulysses
from .token_loss import SHIFTED


class SequenceGroupSampler(Sampler):
    """Row indices in blocks of ``batch``, each block written ``cp`` times in a row, ``dp`` blocks per round.

    accelerate gives batch ``j`` of the dataloader to process ``j % world``: with ``world = dp x cp`` the ``cp``
    processes of group ``g`` get round ``r``'s block ``g``. The last round is completed from the start of the order
    (as ``DistributedSampler`` completes its last round), so every process draws the same number of batches."""

    def __init__(self, rows: int, batch: int, dp: int, cp: int, seed: int, shuffle: bool = True):
        self.rows, self.batch, self.dp, self.cp = rows, batch, dp, cp
        self.seed, self.shuffle, self.epoch = seed, shuffle, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _rounds(self) -> int:
        return max(1, math.ceil(self.rows / (self.batch * self.dp)))

    def __len__(self) -> int:
        return self._rounds() * self.dp * self.cp * self.batch

    def __iter__(self):
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.rows, generator=generator).tolist()
        else:
            order = list(range(self.rows))
        need = self._rounds() * self.dp * self.batch
        order = (order * math.ceil(need / max(1, len(order))))[:need]
        for start in range(0, need, self.batch):
            block = order[start : start + self.batch]
            for _ in range(self.cp):
                yield from block


class ContextParallelMixin:
    """``Trainer`` hooks for a run with ``cp_size`` > 1 (see the module doc); a no-op otherwise."""

    @property
    def sequence_group(self):
        cfg = getattr(self, "tunekit_config", None)
        return ulysses.active_group() if cfg is not None and cfg.cp_size > 1 else None

    def train_sampler(self, dataset):
        """The sequence groups' sampler (read by ``TunekitTrainer._get_train_sampler``); None without cp_size."""
        seq = self.sequence_group
        if seq is None:
            return None
        return SequenceGroupSampler(
            len(dataset),
            self.args.per_device_train_batch_size,
            self.args.world_size // seq.size,
            seq.size,
            self.args.data_seed if self.args.data_seed is not None else self.args.seed,
            shuffle=self.args.train_sampling_strategy != "sequential",
        )

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batches, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        seq = self.sequence_group
        if seq is None or num_items is None:
            return batches, num_items
        # the Trainer sums every process's count, and every process of a group holds the group's whole rows
        return batches, num_items / seq.size

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """Training: this process's part of the rows, its targets shifted before the cut (``shift_labels``), into the
        trained-token loss (``token_loss.py``)."""
        seq = self.sequence_group
        if seq is not None and model.training:
            part, shifted = ulysses.shard_batch(inputs, seq, getattr(self.processing_class, "pad_token_id", None) or 0)
            inputs = {**part, SHIFTED: shifted}
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
