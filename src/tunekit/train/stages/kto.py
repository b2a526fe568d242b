"""Stage ``kto``: Kahneman-Tversky optimisation on single answers labelled desirable / undesirable.

Loss (:func:`tunekit.train.losses.kto_loss`, Ethayarajh et al. 2024): with ``r = log π(y|x) - log π_ref(y|x)``
and ``z₀`` = the batch's KL estimate ``max(0, mean(log π(y'|x) - log π_ref(y'|x)))`` over mismatched
pairs (prompt i with the answer of example i+1; averaged over all ranks, so 2 processes x batch b equal
one process x batch 2b), ``L = λ_D (1 - σ(β (r - z₀)))`` for desirable and
``L = λ_U (1 - σ(β (z₀ - r)))`` for undesirable answers (``kto_chosen_weight``, ``kto_rejected_weight``).
Reference as in dpo (:mod:`tunekit.train.stages.reference_policy`); ``pref_ftx`` adds the desirable answers' NLL.

``padding_free``: the examples of a micro-batch in one row without padding, their mismatched pairs in a second
(:class:`~tunekit.train.batching.PaddingFreeKTOCollator`); log-probs are gathered per sequence as unpacked.

Vision-language / audio models (:class:`MultimodalKTOCollator`): an example's images (videos, audio) are in its prompt,
so they go with its row and with its mismatched pair's row (same prompt, another example's answer); padded only.

Logged: rewards/chosen, rewards/rejected (β r means over desirable / undesirable examples of the log
window), rewards/accuracies (share of examples whose reward has the label's sign: > 0 desirable, < 0 undesirable),
rewards/margins, kto/kl (the KL estimate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...config.schema import Config
from ...data.media_columns import MEDIA_COLUMNS
from ...data.padding_free import refuse_family, rope_index_of
from ..batching import KTOCollator, PaddingFreeKTOCollator, sequence_view
from ..losses import kto_loss
from .dpo import forward_logps
from .reference_policy import iter_reference_logps, load_reference, media_inputs, prepare_frozen, reference_forward
from .stage_trainer import StageTrainer


@dataclass
class MultimodalKTOCollator(KTOCollator):
    """:class:`KTOCollator` for a vision-language / audio model: each example's media go with its row, and again with
    its mismatched pair's row (``kl_`` keys), whose prompt is the example's own (the media sit in the prompt), as the
    family plugin builds them (``data/mm_plugins``)."""

    mm: Any = None

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = super().__call__(features)
        media = {k: [p for f in features for p in (f.get(k) or [])] for k in MEDIA_COLUMNS}
        extra = {k: v for k, v in media.items() if k != "images" and v}
        batch.update(self.mm.collate(media["images"], batch["input_ids"], **extra))
        batch.update(
            {f"kl_{k}": v for k, v in self.mm.collate(media["images"], batch["kl_input_ids"], **extra).items()}
        )
        return batch


class KTOTrainer(StageTrainer):
    def __init__(self, *args, ref_model=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.ref_model = prepare_frozen(ref_model, self)

    def reference_logps(self, model, inputs) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad(), reference_forward(model, self.ref_model) as ref:
            main = forward_logps(ref, **sequence_view(inputs), **media_inputs(inputs), chunked=self.chunked_logps)[0]
            kl = forward_logps(
                ref, **sequence_view(inputs, "kl_"), **media_inputs(inputs, "kl_"), chunked=self.chunked_logps
            )[0]
        return main, kl

    def policy_kl_logps(self, model, inputs) -> torch.Tensor:
        """The policy's log-probs of the KL pairs, without gradient: the estimate ``z0`` is a detached baseline (as in
        the KTO paper and TRL)."""
        with torch.no_grad():
            return forward_logps(
                model, **sequence_view(inputs, "kl_"), **media_inputs(inputs, "kl_"), chunked=self.chunked_logps
            )[0]

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        cfg = self.tunekit_config
        # the reference before the policy's forward pass (as in dpo): its no-grad transients then come and go while
        # nothing is held, instead of on top of the policy's activations (and, on the CPU, splitting the heap)
        if "ref_logps" in inputs:
            ref, ref_kl = inputs["ref_logps"], inputs["ref_kl_logps"]
        else:
            ref, ref_kl = self.reference_logps(model, inputs)
        kl_logps = self.policy_kl_logps(model, inputs)  # also before the policy's forward, for the same reason
        logps, lengths = forward_logps(
            model, **sequence_view(inputs), **media_inputs(inputs), chunked=self.chunked_logps
        )
        ref, ref_kl = ref.to(logps), ref_kl.to(logps)
        kl = self.accelerator.reduce((kl_logps - ref_kl).mean(), reduction="mean")  # one estimate for the global batch
        desirable = inputs["desirable"].bool()
        losses, rewards = kto_loss(
            logps, ref, desirable, kl, cfg.pref_beta, cfg.kto_chosen_weight, cfg.kto_rejected_weight
        )
        if cfg.pref_ftx > 0:
            losses = losses + cfg.pref_ftx * torch.where(desirable, -logps / lengths, torch.zeros_like(logps))
        right = torch.where(desirable, rewards > 0, rewards < 0)
        metrics = {"kto/kl": kl.detach(), "rewards/accuracies": right.float().mean()}
        if desirable.any():
            metrics["rewards/chosen"] = rewards[desirable].mean()
        if (~desirable).any():
            metrics["rewards/rejected"] = rewards[~desirable].mean()
        if desirable.any() and (~desirable).any():
            metrics["rewards/margins"] = rewards[desirable].mean() - rewards[~desirable].mean()
        self.store_metrics(metrics)
        loss = losses.mean()
        return (loss, {"losses": losses}) if return_outputs else loss


def precompute_reference(dataset, collator, model, ref_model, batch_size: int):
    """Reference log-probs of every example and of its KL pair, computed once before training."""
    if dataset is None:
        return None
    main, kl = [], []
    for _, (logps, kl_logps) in iter_reference_logps(dataset, collator, model, ref_model, batch_size, ["", "kl_"]):
        main += logps.tolist()
        kl += kl_logps.tolist()
    return dataset.add_column("ref_logps", main).add_column("ref_kl_logps", kl)


def with_kl_pairs(dataset):
    """Fix each example's mismatched answer for the KL estimate: the answer of the next example (dataset order)."""
    if dataset is None:
        return None
    answers = dataset["response_ids"]
    return dataset.add_column("kl_response_ids", answers[1:] + answers[:1] if len(answers) > 1 else answers)


def kto_collator(cfg: Config, tokenizer, mm=None, model=None):
    """Padded or padding-free batches; with ``mm`` (a vision-language / audio model's plugin) each sequence carries its
    example's media (padding-free: per-sequence 3-D positions from ``model``'s rope index for the Qwen-VL families)."""
    if cfg.padding_free:
        if mm is not None:
            refuse_family(mm, "padding_free")
            return PaddingFreeKTOCollator(mm=mm, rope_index=rope_index_of(model))
        return PaddingFreeKTOCollator()
    if mm is not None:
        return MultimodalKTOCollator(
            pad_token_id=tokenizer.pad_token_id, pad_to_multiple_of=cfg.pad_to_multiple_of, mm=mm
        )
    return KTOCollator(pad_token_id=tokenizer.pad_token_id, pad_to_multiple_of=cfg.pad_to_multiple_of)


def build_trainer(cfg: Config, args, model, tokenizer, data, callbacks):
    collator = kto_collator(cfg, tokenizer, getattr(data, "mm", None), model)
    trainer = KTOTrainer(
        model=model,
        args=args,
        train_dataset=with_kl_pairs(data.train),
        eval_dataset=with_kl_pairs(data.eval),
        data_collator=collator,
        processing_class=tokenizer,
        callbacks=callbacks,
        tunekit_config=cfg,
        ref_model=load_reference(cfg, tokenizer),
    )
    if cfg.precompute_ref_log_probs:  # on the training device, then the reference is freed
        size = cfg.per_device_eval_batch_size
        trainer.train_dataset = precompute_reference(
            trainer.train_dataset, collator, trainer.model, trainer.ref_model, size
        )
        trainer.eval_dataset = precompute_reference(
            trainer.eval_dataset, collator, trainer.model, trainer.ref_model, size
        )
        trainer.ref_model = None
    return trainer
