"""The trainer base of the stages with their own loss (rm, dpo, kto, ppo, grpo).

Pair stages (dpo, rm: ``pair_weighted``): every pair of an optimizer step weighs the same. Stage batches carry no
``labels``, so HF counts no tokens (``num_items_in_batch`` None); :meth:`StageTrainer.get_batch_samples` gives the
accumulation window's PAIR count instead (summed over the data-parallel ranks when ``average_tokens_across_devices``,
as HF sums SFT's token count), and :meth:`StageTrainer.pair_loss` returns ``Σ ℓ over the micro-batch's pairs / pairs
of the step`` (x the number of processes under data parallelism, undone by DDP's gradient mean), marked as already
scaled for accumulation (``loss_is_scaled_for_ga``), so HF does not divide by the accumulation count again. The step's
loss is then ``Σ_step ℓ / pairs of the step`` whatever the micro-batch sizes (``max_tokens_per_batch`` forms unequal
ones; the short last window of an epoch too): the loss of one batch holding the step's pairs. With equal sizes ``B`` x
``k`` it is today's mean of micro-batch means, ``(1/k) Σ (1/B) Σ ℓ`` (tests/train/test_pair_weighting.py). Without a
count (evaluation, ``prediction_step``) the loss is the micro-batch's mean.

Other stages (kto, ppo, grpo): ``compute_loss`` returns the micro-batch's mean loss and the HF Trainer divides by the
number of accumulated micro-batches. Stage metrics (``rewards/chosen`` ...) are stored per micro-batch and averaged
(over all ranks) into the next log line (training) or into the eval metrics (prefixed ``eval_``).
"""

from __future__ import annotations

from collections import defaultdict

import torch

from ..trainer import TunekitTrainer


class StageTrainer(TunekitTrainer):
    pair_weighted = False  # dpo, rm: the step's loss is the sum of its pairs' losses / its pair count (module doc)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._scaled_by_count = False

    # ---- pair stages: every pair of an optimizer step weighs the same ----------------------------
    @property
    def loss_is_scaled_for_ga(self) -> bool | None:
        """Read by ``Trainer.training_step`` after ``compute_loss``: True when :meth:`pair_loss` divided by the step's
        pair count (no further division by the accumulation count), else None (HF's own rule)."""
        return True if self._scaled_by_count else None

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batches, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        if self.pair_weighted and num_items is None and batches:
            num_items = torch.tensor(sum(pair_count(b) for b in batches), dtype=torch.int64, device=device)
            if self.args.average_tokens_across_devices and self.args.world_size > 1:  # as HF sums the token count
                num_items = self.accelerator.gather(num_items).sum()
        return batches, num_items

    def pair_loss(self, losses: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
        """The micro-batch's share of the step's loss: ``losses.sum() / pairs of the step`` (x processes under data
        parallelism, as ``Trainer.compute_loss`` scales a token-normalised loss), or ``losses.mean()`` without a
        count."""
        self._scaled_by_count = num_items_in_batch is not None
        if num_items_in_batch is None:
            return losses.mean()
        count = num_items_in_batch
        loss = losses.sum() / (count.to(losses.device) if torch.is_tensor(count) else count)
        if self.args.average_tokens_across_devices and self.args.world_size > 1:
            loss = loss * self.accelerator.num_processes
        return loss

    @property
    def chunked_logps(self) -> bool:
        """dpo/kto log-probs from the head a chunk of tokens at a time (``reference_policy.forward_logps``), as the run
        decided (``RunDecisions.chunked_lm_head``, train/decisions)."""
        return self.run_decisions.chunked_lm_head.on

    # ---- metrics -------------------------------------------------------------------------------
    def store_metrics(self, metrics: dict[str, float | torch.Tensor]) -> None:
        mode = "train" if self.model.training else "eval"
        for key, value in metrics.items():
            self._metrics[mode][key].append(
                float(value.detach().float().mean()) if torch.is_tensor(value) else float(value)
            )

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if "loss" in logs else "eval"
        prefix = "eval_" if mode == "eval" else ""
        if mode == "train" or any(k.startswith("eval_") for k in logs):  # every rank logs: the metrics of all ranks
            sums = [{key: (sum(values), len(values)) for key, values in self._metrics[mode].items() if values}]
            if self.args.world_size > 1:
                gathered = [None] * self.args.world_size
                torch.distributed.all_gather_object(gathered, sums[0])
                sums = gathered
            for key in dict.fromkeys(k for part in sums for k in part):
                total, count = (sum(part[key][i] for part in sums if key in part) for i in (0, 1))
                logs[f"{prefix}{key}"] = round(total / count, 6)
            self._metrics[mode].clear()
        super().log(logs, start_time)

    # ---- evaluation: our compute_loss, no logits gathered ---------------------------------------
    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad(), self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    def count_input_tokens(self, inputs) -> int | None:
        """Tokens seen = non-padding tokens of every sequence the step trains on (a padding-free row has no
        padding); read by ``TunekitTrainer._track_num_input_tokens``."""
        masks = [v for k, v in inputs.items() if k.endswith("attention_mask") and torch.is_tensor(v)]
        masks += [v[-1:] for k, v in inputs.items() if k.endswith("cu_seqlens") and torch.is_tensor(v)]
        return int(sum(int(m.sum()) for m in masks)) if masks else 0


def pair_count(batch: dict) -> int:
    """Pairs in a dpo/rm batch: chosen then rejected sequences, padded rows (``input_ids`` ``[2B, L]``) or padding-free
    (``cu_seqlens`` of ``2B`` sequences)."""
    cu = batch.get("cu_seqlens")
    return (cu.numel() - 1) // 2 if torch.is_tensor(cu) else batch["input_ids"].shape[0] // 2
