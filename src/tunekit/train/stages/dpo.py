"""Stage ``dpo``: direct preference optimisation and its loss family (``pref_loss``).

Losses and their formulas: :func:`tunekit.train.losses.preference_loss` (sigmoid = DPO, hinge, ipo,
orpo, simpo; ``dpo_label_smoothing`` = cDPO), plus ``pref_ftx`` x the chosen answer's per-token NLL.
Chosen and rejected go through the model in one concatenated forward; with ``chunked_lm_loss`` (default) the LM
head and log-softmax run on the answers' labelled positions only, a chunk of tokens at a time
(:func:`tunekit.train.chunked_head.forward_sequence_logps`, exact gradients; tests/train/test_chunked_logprobs.py). The
reference (see
:mod:`tunekit.train.stages.reference_policy`) is the frozen base — with LoRA the policy with its adapter disabled,
no second copy — or ``ref_model``; ``precompute_ref_log_probs`` computes it once before training.

Why not TRL's DPOTrainer: it re-tokenizes from text with its own prompt/cutoff rules; tunekit's
data (templates, shared-prompt cutoff, dropped-pair reporting) arrives tokenized, and the loss is a
few lines, so the loss and batching live here.

``padding_free``: the pairs of a micro-batch in one row without padding
(:class:`~tunekit.train.batching.PaddingFreePairCollator`); the log-probs, the reference's included, are gathered per
sequence, so loss, metrics and gradients equal the padded batch's (tests/train/test_padding_free_preference.py;
docs/padding-free.md).

Logged per step: rewards/chosen, rewards/rejected, rewards/accuracies, rewards/margins,
logps/chosen, logps/rejected (+ loss/sft with pref_ftx).
"""

from __future__ import annotations

import torch

from ...config.schema import Config
from ..batching import MultimodalPairCollator, PairCollator, padding_free_pair_collator, sequence_view
from ..losses import preference_loss
from .reference_policy import (
    forward_logps,
    iter_reference_logps,
    load_reference,
    media_inputs,
    prepare_frozen,
    reference_forward,
)
from .stage_trainer import StageTrainer

REFERENCE_FREE = ("orpo", "simpo")


class DPOTrainer(StageTrainer):
    pair_weighted = True  # every pair of a step weighs the same (stage_trainer.py)

    def __init__(self, *args, ref_model=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.ref_model = prepare_frozen(ref_model, self)

    @property
    def needs_reference(self) -> bool:
        return self.tunekit_config.pref_loss not in REFERENCE_FREE

    def reference_logps(self, model, inputs) -> torch.Tensor:
        with torch.no_grad(), reference_forward(model, self.ref_model) as ref:
            return forward_logps(ref, **sequence_view(inputs), **media_inputs(inputs), chunked=self.chunked_logps)[0]

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        cfg = self.tunekit_config
        ref = None
        if self.needs_reference:
            # before the policy's forward pass: the reference's no-grad transients then come and go while nothing is
            # held, instead of on top of the policy's activations (and, on the CPU, splitting the heap around them)
            ref = inputs["ref_logps"] if "ref_logps" in inputs else self.reference_logps(model, inputs)
        logps, lengths = forward_logps(
            model, **sequence_view(inputs), **media_inputs(inputs), chunked=self.chunked_logps
        )
        b = logps.shape[0] // 2
        if ref is not None:
            ref = ref.to(logps)
        out = preference_loss(
            cfg.pref_loss,
            cfg.pref_beta,
            logps[:b],
            logps[b:],
            None if ref is None else ref[:b],
            None if ref is None else ref[b:],
            lengths[:b],
            lengths[b:],
            cfg.dpo_label_smoothing,
            cfg.simpo_gamma,
        )
        losses = out.losses
        metrics = {}
        if cfg.pref_ftx > 0:
            sft = -logps[:b] / lengths[:b]
            losses = losses + cfg.pref_ftx * sft
            metrics["loss/sft"] = sft.mean()
        metrics.update(
            {
                "rewards/chosen": out.chosen_rewards.mean(),
                "rewards/rejected": out.rejected_rewards.mean(),
                "rewards/accuracies": (out.chosen_rewards > out.rejected_rewards).float().mean(),
                "rewards/margins": (out.chosen_rewards - out.rejected_rewards).mean(),
                "logps/chosen": logps[:b].detach().mean(),
                "logps/rejected": logps[b:].detach().mean(),
            }
        )
        self.store_metrics(metrics)
        loss = self.pair_loss(losses, num_items_in_batch)
        return (loss, {"losses": losses}) if return_outputs else loss


def precompute_reference(
    dataset, collator, model, ref_model, batch_size: int, columns=("ref_chosen_logps", "ref_rejected_logps")
):
    """Add the reference log-prob sums of every pair as columns (computed once, in eval mode)."""
    if dataset is None:
        return None
    chosen, rejected = [], []
    for n, (logps,) in iter_reference_logps(dataset, collator, model, ref_model, batch_size, [""]):
        chosen += logps[:n].tolist()  # the collator stacks the chosen answers first, then the rejected ones
        rejected += logps[n:].tolist()
    return dataset.add_column(columns[0], chosen).add_column(columns[1], rejected)


def pair_collator(cfg: Config, tokenizer, mm=None, model=None):
    """The batches of dpo and rm: padded or padding-free, with the pair's images (``mm``: a vision-language model's
    plugin, dpo only; ``model`` gives the padding-free row its M-RoPE positions, ``train/batching.py``)."""
    if cfg.padding_free:
        return padding_free_pair_collator(mm, model)
    if mm is not None:  # both answers see the pair's images
        return MultimodalPairCollator(
            pad_token_id=tokenizer.pad_token_id, pad_to_multiple_of=cfg.pad_to_multiple_of, mm=mm
        )
    return PairCollator(pad_token_id=tokenizer.pad_token_id, pad_to_multiple_of=cfg.pad_to_multiple_of)


def build_trainer(cfg: Config, args, model, tokenizer, data, callbacks):
    collator = pair_collator(cfg, tokenizer, getattr(data, "mm", None), model)
    ref_model = load_reference(cfg, tokenizer) if cfg.pref_loss not in REFERENCE_FREE else None
    trainer = DPOTrainer(
        model=model,
        args=args,
        train_dataset=data.train,
        eval_dataset=data.eval,
        data_collator=collator,
        processing_class=tokenizer,
        callbacks=callbacks,
        tunekit_config=cfg,
        ref_model=ref_model,
    )
    if cfg.precompute_ref_log_probs and trainer.needs_reference:  # on the training device, then the reference is freed
        size = cfg.per_device_eval_batch_size
        trainer.train_dataset = precompute_reference(
            trainer.train_dataset, collator, trainer.model, trainer.ref_model, size
        )
        trainer.eval_dataset = precompute_reference(
            trainer.eval_dataset, collator, trainer.model, trainer.ref_model, size
        )
        trainer.ref_model = None
    return trainer
