"""Stage ``rm``: a reward model — the causal LM with a scalar value head, trained on preference pairs.

Score of a sequence = the value head at its last token. Loss (Bradley-Terry):
``L = -log σ(r(x, y_w) - r(x, y_l))`` (:func:`tunekit.train.losses.pairwise_reward_loss`).
Eval metric ``accuracy`` = share of pairs with ``r(x, y_w) > r(x, y_l)``. The output folder holds the LM
(or LoRA adapter) plus ``value_head.safetensors``; :func:`tunekit.train.stages.value_head.load_value_head_model`
reloads it.

Vision-language / audio models: the value head sits on the language model's last hidden state; both answers of a pair
see the pair's images (videos, audio), as in dpo. ``padding_free`` is text-only here.

``padding_free``: the pairs of a micro-batch in one row without padding (as dpo); a score is the value head at
each sequence's last token of that row (:func:`~tunekit.train.batching.segment_last`).

Why not TRL's RewardTrainer: it re-tokenizes text and trains ``AutoModelForSequenceClassification``;
tunekit keeps the causal LM + value head so the same folder serves as PPO critic/reward model.
"""

from __future__ import annotations

from ...config.problems import config_error
from ...config.schema import Config
from ...model.loader import load_model as load_lm
from ..batching import sequence_view
from ..losses import pairwise_reward_loss
from .dpo import pair_collator
from .reference_policy import media_inputs
from .stage_trainer import StageTrainer
from .value_head import sequence_scores, with_value_head


def load_model(cfg: Config, tokenizer):

    return with_value_head(load_lm(cfg, tokenizer, is_trainable=cfg.do_train), cfg)


class RewardTrainer(StageTrainer):
    pair_weighted = True  # every pair of a step weighs the same (stage_trainer.py)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        view = sequence_view(inputs)
        _, values = model(
            view["input_ids"],
            attention_mask=view["attention_mask"],
            position_ids=view["position_ids"],
            **media_inputs(inputs),
        )
        scores = sequence_scores(values, view)
        b = scores.shape[0] // 2
        chosen, rejected = scores[:b], scores[b:]
        loss = self.pair_loss(pairwise_reward_loss(chosen, rejected), num_items_in_batch)
        correct = (chosen > rejected).float().mean()
        self.store_metrics(
            {
                "rewards/chosen": chosen.detach().mean(),
                "rewards/rejected": rejected.detach().mean(),
                "rewards/accuracies": correct,
                "rewards/margins": (chosen - rejected).detach().mean(),
                "accuracy": correct,
            }
        )
        return (loss, {"chosen": chosen, "rejected": rejected}) if return_outputs else loss


def build_trainer(cfg: Config, args, model, tokenizer, data, callbacks):
    mm = getattr(data, "mm", None)
    if mm is not None and cfg.padding_free:
        raise config_error("rm_padding_free_vlm", ("padding_free",), family=mm.NAME)
    return RewardTrainer(
        model=model,
        args=args,
        train_dataset=data.train,
        eval_dataset=data.eval,
        data_collator=pair_collator(cfg, tokenizer, mm),
        processing_class=tokenizer,
        callbacks=callbacks,
        tunekit_config=cfg,
    )
