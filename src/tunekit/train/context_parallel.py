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
  (:func:`~tunekit.train.engines.ulysses.shard_batch`) and sums the cross-entropy of its shifted labels, with the LM
  head on its trained positions only, a chunk of tokens at a time, as the run decided (``trained_tokens_loss``,
  ``chunked_lm_head``; Liger's fused loss is off: the model's forward never sees labels), divided by that count and
  multiplied by the number of processes (DDP and FSDP2 average the gradients over all of them). The sum over a
  group's processes is then exactly the micro-batch's loss on one process.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data import Sampler

from ..data.labels import IGNORE_INDEX
from ..model.moe import add_router_aux_loss
from .engines import ulysses
from .token_loss import causal_lm_loss, head_on


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
        if seq is None or not batches:
            return batches, num_items
        # every process of a group holds the group's whole rows: the sum over all processes counts each cp times
        count = sum(b["labels"][:, 1:].ne(IGNORE_INDEX).sum() for b in batches).to(device)
        return batches, self.accelerator.gather(count.reshape(1)).sum() // seq.size

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        seq = self.sequence_group
        if seq is None or not model.training:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        self.loss_is_scaled_for_ga = True  # divided by the step's tokens below (Trainer.training_step reads it)
        pad = getattr(self.processing_class, "pad_token_id", None) or 0
        part, shifted = ulysses.shard_batch(inputs, seq, pad)
        keep = shifted.ne(IGNORE_INDEX)
        targets = shifted[keep]
        head = self._trained_tokens_head(model, inputs, return_outputs)
        kind, alpha = self._sft_loss_kind()
        ref_logits = self._asft_reference_rows(model, part, keep, head) if kind == "asft" else None
        count = num_items_in_batch if num_items_in_batch is not None else max(1, targets.numel())
        fused = (
            self._chunked_head_loss(model, head, part, keep, targets) if head is not None and kind is None else None
        )
        if fused is not None:  # the head and the loss a chunk of tokens at a time (RunDecisions.chunked_lm_head)
            outputs, total = fused
            loss = total / (count.to(total.device) if torch.is_tensor(count) else count)
        else:
            if head is None:
                outputs = model(**part)
                logits = outputs.logits[keep]
            else:
                with head_on(head, keep):
                    outputs = model(**part)
                logits = outputs.logits
            loss = causal_lm_loss(logits, targets, count, kind, alpha, ref_logits)
        loss = add_router_aux_loss(loss, outputs, self.tunekit_config)  # model/moe.py
        loss = loss * self.accelerator.num_processes
        return (loss, outputs) if return_outputs else loss
