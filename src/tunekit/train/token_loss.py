"""Causal-LM loss with the LM head run only where a token is trained.

The usual path computes logits for every position (``batch x seq x vocab``, upcast to fp32) and then
throws most of them away: prompt tokens and padding carry label -100. For a 7B model with a 152k vocab
that is 2.4 GiB of fp32 logits per 4k-token sample, and for small models the head and its softmax are a
large share of the step. Here a forward pre-hook on the output embedding (``get_output_embeddings()``,
the module every HF causal LM applies to its final hidden states) keeps only the rows whose next token
is trained, so the head, the fp32 upcast and the cross-entropy run on ``N`` trained tokens instead of
``batch x seq`` positions.

The loss is the one ``transformers.loss.ForCausalLMLoss`` computes, term for term: labels shifted by
one, cross-entropy summed and divided by ``num_items_in_batch`` (trained tokens of the whole optimizer
step, so accumulation and data parallelism give the same gradients as one big batch), or the mean when
the Trainer gives no count. Model-specific logit processing after the head (Gemma's soft-capping,
logit scales) still runs, on the kept rows. The full path is used when logits are needed
(``compute_metrics``), under ``torch_compile`` (data-dependent shapes would recompile every step) and
with Liger's fused linear cross-entropy, which already avoids the logits.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F

from ..data.labels import IGNORE_INDEX
from ..model.moe import add_router_aux_loss
from . import chunked_head
from .chunked_head import trained_positions  # which hidden states the LM head sees (re-exported)
from .losses import sft_token_losses
from .stages.reference_policy import reference_forward
from .thought_loss import THOUGHT_KEY, step_weight_sum, target_weights, weighted_loss


@contextmanager
def head_on(head: torch.nn.Module, keep: torch.Tensor):
    """While active, ``head`` sees only the hidden states at ``keep`` (as one ``[1, N, hidden]`` sequence)."""
    seen = []

    def select(module, args, kwargs):
        hidden = args[0]
        if hidden.dim() != 3 or hidden.shape[:2] != keep.shape:
            raise RuntimeError(
                f"the LM head received hidden states of shape {tuple(hidden.shape)}, expected "
                f"[{keep.shape[0]}, {keep.shape[1]}, hidden]: set trained_tokens_loss: false for this model"
            )
        seen.append(True)
        return (hidden[keep].unsqueeze(0), *args[1:]), kwargs

    handle = head.register_forward_pre_hook(select, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def causal_lm_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    num_items_in_batch=None,
    kind: str | None = None,
    alpha: float = 1.0,
    ref_logits: torch.Tensor | None = None,
) -> torch.Tensor:
    """``ForCausalLMLoss`` on already-selected rows: sum / num_items_in_batch, or the mean without a count.

    ``kind`` = ``dft`` / ``eaft`` / ``asft`` (+ the reference's ``ref_logits`` on the same rows) changes each token's
    loss (``losses.sft_token_losses``, the formulas)."""
    logits = logits.reshape(-1, logits.shape[-1]).float()
    if targets.numel() == 0:  # nothing trained in this micro-batch: a zero that keeps the graph connected
        return logits.sum() * 0.0
    if kind is not None:
        if ref_logits is not None:
            ref_logits = ref_logits.reshape(-1, ref_logits.shape[-1])
        per_token = sft_token_losses(logits, targets, kind, alpha, ref_logits)
        if num_items_in_batch is None:
            return per_token.mean()
        loss = per_token.sum()
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        return loss / num_items_in_batch
    if num_items_in_batch is None:
        return F.cross_entropy(logits, targets, reduction="mean")
    loss = F.cross_entropy(logits, targets, reduction="sum")
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


SHIFTED = "shift_labels"  # transformers' name for labels already at the position that predicts them


def label_positions(inputs: dict) -> tuple[dict, torch.Tensor, torch.Tensor] | None:
    """``(the model's inputs, keep, targets)`` of a batch with ``labels`` (position t predicts label t+1) or
    ``shift_labels`` (each position's target already in place: a process's part of a row under context parallelism,
    ``train/context_parallel.py``, where the target of a part's last position lies in the next part); None without
    either."""
    if SHIFTED in inputs:
        shifted = inputs[SHIFTED]
        keep = shifted != IGNORE_INDEX
        return {k: v for k, v in inputs.items() if k != SHIFTED}, keep, shifted[keep]
    if "labels" not in inputs:
        return None
    keep, targets = trained_positions(inputs["labels"])
    return {k: v for k, v in inputs.items() if k != "labels"}, keep, targets


class TrainedTokensLossMixin:
    """``Trainer.compute_loss`` for batches with ``labels``: the LM head only on trained positions (see module doc)."""

    def _trained_tokens_head(self, model, inputs, return_outputs: bool):
        decisions = getattr(self, "run_decisions", None)  # trained_tokens_loss, torch_compile, Liger (train/decisions)
        if decisions is None or not decisions.trained_tokens_loss.on or label_positions(inputs) is None:
            return None
        if self.label_smoother is not None:
            return None
        if self.compute_loss_func is not None or (return_outputs and self.compute_metrics is not None):
            return None
        unwrapped = self.accelerator.unwrap_model(model)
        get_head = getattr(unwrapped, "get_output_embeddings", None)
        return get_head() if callable(get_head) else None

    def _sft_loss_kind(self) -> tuple[str | None, float]:
        """The SFT loss variant (``use_dft_loss`` / ``use_eaft_loss`` / ``use_asft_loss``) and its parameter."""
        cfg = getattr(self, "tunekit_config", None)
        if cfg is None:
            return None, 1.0
        if getattr(cfg, "use_asft_loss", False):
            return "asft", cfg.asft_alpha
        if getattr(cfg, "use_dft_loss", False):
            return "dft", 1.0
        if getattr(cfg, "use_eaft_loss", False):
            return "eaft", cfg.eaft_alpha
        return None, 1.0

    def _asft_reference_rows(self, model, inputs, keep, head) -> torch.Tensor | None:
        """ASFT: the reference's logits on the trained rows, without gradient (``stages/reference_policy``: the frozen
        copy ``asft_reference``, or with LoRA the policy with its adapter disabled); its LM head sees only those
        rows."""
        with torch.no_grad(), reference_forward(model, getattr(self, "asft_reference", None)) as ref:
            if head is None:
                return ref(**inputs).logits[keep]
            with head_on(ref.get_output_embeddings(), keep):
                return ref(**inputs).logits

    def _across_devices(self, loss, scaled: bool):
        """As ``Trainer.compute_loss``: a loss divided by the step's tokens of every process, times the processes
        (data parallelism averages the gradients over them)."""
        if self.args.average_tokens_across_devices and scaled:
            loss = loss * (
                self.accelerator.num_processes // self.get_tp_size() if self.args.n_gpu <= 1 else self.args.n_gpu
            )
        return loss

    @staticmethod
    def _trained_logits(model, inputs, keep, head):
        """``(outputs, the logits of the keep rows)``: the LM head run on those rows only (``head``), else the whole
        logits (a variant's loss, or no trained-token head) and their rows."""
        if head is None:
            outputs = model(**inputs)
            return outputs, outputs.logits[keep]
        with head_on(head, keep) as seen:
            outputs = model(**inputs)
        if not seen:
            raise RuntimeError(
                "the model never called its output embedding (get_output_embeddings()): "
                "set trained_tokens_loss: false for this model"
            )
        return outputs, outputs.logits

    def _chunked_head_loss(self, model, head, inputs, keep, targets):
        """``(outputs, summed loss)`` from :func:`chunked_head.fused_forward`, or None for the plain path
        (``chunked_lm_loss: false``, a wrapped or sharded head, or a model that changes its head's output: remembered
        after the first try)."""
        if not self.run_decisions.chunked_lm_head.on or getattr(self, "_chunked_head_off", False):
            return None
        if not chunked_head.usable(head):
            return None
        fused = chunked_head.fused_forward(model, head, inputs, keep, targets)
        self._chunked_head_off = fused is None
        return fused

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """A step whose batches weight the thought (``thought_loss.py``) is normalised by its summed weights."""
        batches, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        if num_items is not None and batches and THOUGHT_KEY in batches[0]:
            num_items = step_weight_sum(self, batches, device)
        return batches, num_items

    def _thought_weighted_loss(self, model, inputs, return_outputs, num_items_in_batch):
        """``thought_loss_weight`` in (0, 1): the weighted trained-token loss (``thought_loss.py``), the LM head on the
        trained positions when it can be."""
        inputs = dict(inputs)
        thought, labels = inputs.pop(THOUGHT_KEY), inputs["labels"]
        head = self._trained_tokens_head(model, inputs, return_outputs)
        del inputs["labels"]
        keep, targets = trained_positions(labels)
        weights = target_weights(labels, thought, self.tunekit_config.thought_loss_weight)
        outputs, logits = self._trained_logits(model, inputs, keep, head)
        scaled = self.model_accepts_loss_kwargs and num_items_in_batch is not None
        loss = weighted_loss(logits, targets, weights, num_items_in_batch if scaled else None)
        loss = add_router_aux_loss(loss, outputs, getattr(self, "tunekit_config", None))  # model/moe.py
        loss = self._across_devices(loss, scaled)
        return (loss, outputs) if return_outputs else loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if THOUGHT_KEY in inputs:
            return self._thought_weighted_loss(model, inputs, return_outputs, num_items_in_batch)
        head = self._trained_tokens_head(model, inputs, return_outputs)
        kind, alpha = self._sft_loss_kind()
        split = label_positions(inputs)
        if split is None or (head is None and kind is None and SHIFTED not in inputs):
            return super().compute_loss(  # transformers' own loss, from the model's forward
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )
        plain, keep, targets = split
        ref_logits = self._asft_reference_rows(model, plain, keep, head) if kind == "asft" else None
        scaled = self.model_accepts_loss_kwargs and num_items_in_batch is not None
        fused = (
            self._chunked_head_loss(model, head, plain, keep, targets) if head is not None and kind is None else None
        )
        if fused is not None:  # head + loss in chunks of tokens (chunked_head.py): the logits are never held whole
            outputs, total = fused
            count = num_items_in_batch if scaled else max(1, targets.numel())
            loss = total / (count.to(total.device) if torch.is_tensor(count) else count)
        else:
            outputs, logits = self._trained_logits(model, plain, keep, head)
            loss = causal_lm_loss(logits, targets, num_items_in_batch if scaled else None, kind, alpha, ref_logits)
        loss = add_router_aux_loss(loss, outputs, getattr(self, "tunekit_config", None))  # model/moe.py
        loss = self._across_devices(loss, scaled)
        return (loss, outputs) if return_outputs else loss
