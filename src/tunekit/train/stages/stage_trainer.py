"""The trainer base of the stages with their own loss (rm, dpo, kto, ppo, grpo).

``compute_loss`` returns the mean loss of the micro-batch; the HF Trainer divides by the number of
accumulated micro-batches (no ``labels`` column, so no token count), which makes batch b x accumulation
k equal batch b*k. Stage metrics (``rewards/chosen`` ...) are stored per micro-batch and averaged (over all
ranks) into the next log line (training) or into the eval metrics (prefixed ``eval_``).
"""

from __future__ import annotations

from collections import defaultdict

import torch

from ..trainer import TunekitTrainer


class StageTrainer(TunekitTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}

    @property
    def chunked_logps(self) -> bool:
        """``chunked_lm_loss``: dpo/kto log-probs from the head a chunk of tokens at a time (``reference_policy.forward_logps``;
        not under torch_compile: data-dependent rows)."""
        return bool(self.tunekit_config.chunked_lm_loss and not self.args.torch_compile)

    # ---- metrics -------------------------------------------------------------------------------
    def store_metrics(self, metrics: dict[str, float | torch.Tensor]) -> None:
        mode = "train" if self.model.training else "eval"
        for key, value in metrics.items():
            self._metrics[mode][key].append(float(value.detach().float().mean()) if torch.is_tensor(value) else float(value))

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

    def _track_num_input_tokens(self, inputs):
        """Tokens seen = non-padding tokens of every sequence the step trains on (a padding-free row has no padding)."""
        if self.args.include_num_input_tokens_seen == "no":
            return
        masks = [v for k, v in inputs.items() if k.endswith("attention_mask") and torch.is_tensor(v)]
        masks += [v[-1:] for k, v in inputs.items() if k.endswith("cu_seqlens") and torch.is_tensor(v)]
        if masks:
            self.state.num_input_tokens_seen += int(sum(int(m.sum()) for m in masks))
