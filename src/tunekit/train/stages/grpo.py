"""Stage ``grpo``: group-relative policy optimisation (Shao et al. 2024, DeepSeekMath).

Per prompt, ``num_generations`` completions are sampled and rewarded (reward functions and/or a
reward model, see :mod:`tunekit.train.stages.rollout`); each completion's advantage is its reward
standardised within its group, ``A_i = (r_i - mean(r)) / (std(r) + 1e-4)`` — no critic. The loss is
:func:`tunekit.train.losses.grpo_loss`: the clipped surrogate (``cliprange``) minus ``grpo_beta`` x the
k3 KL estimate against the reference (:mod:`tunekit.train.stages.reference_policy`; skipped when ``grpo_beta`` = 0),
averaged per completion, then over completions. ``grpo_iterations`` > 1 reuses a rollout for that many
optimizer steps (the clipping then matters).

Logged: rewards/mean, rewards/std, completions/mean_length, objective/kl, objective/clipfrac.

Why not TRL's GRPOTrainer: it renders prompts with the tokenizer's chat template from text columns and
owns the generation/data loop; tunekit's prompts arrive rendered with tunekit's templates and cutoff policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...config.schema import Config
from ..batching import PromptCollator
from ..losses import group_advantages, grpo_loss, masked_mean
from .reference_policy import load_reference, prepare_frozen, reference_forward
from .rollout import (
    RepeatSampler,
    RolloutCache,
    Samples,
    check_rewards,
    compute_rewards,
    decode_completions,
    generate,
    load_reward_functions,
    load_reward_model,
    response_logps,
    rollout_stop_ids,
)
from .stage_trainer import StageTrainer


@dataclass
class GRPORollout:
    samples: Samples
    old_logps: torch.Tensor | None
    ref_logps: torch.Tensor | None
    advantages: torch.Tensor
    rewards: torch.Tensor


def lm_logits(model, samples: Samples) -> torch.Tensor:
    return model(
        input_ids=samples.sequences,
        attention_mask=samples.attention_mask,
        position_ids=samples.position_ids,
        use_cache=False,
    ).logits


class RolloutTrainerBase(StageTrainer):
    """Sampler, cache and reward plumbing of ppo/grpo."""

    reuse: int = 1

    def __init__(self, *args, ref_model=None, reward_fns=(), reward_model=None, stop_ids=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.ref_model = prepare_frozen(ref_model, self)
        self.reward_fns = list(reward_fns)
        self.reward_model = prepare_frozen(reward_model, self)
        self.stop_ids = list(stop_ids)
        self.cache = RolloutCache(self.reuse)
        if self.args.world_size > 1:  # the Trainer seeds every rank alike: sample different completions on each rank
            from transformers import set_seed

            set_seed(self.args.seed + self.args.process_index)

    def train_sampler(self, dataset):
        # one optimizer step of prompts over all ranks: the dataloader deals its batches out to the ranks in turn,
        # so each rank gets the same micro-batches again on each of the ``reuse`` steps of a rollout
        group = self.args.per_device_train_batch_size * self.args.gradient_accumulation_steps * self.args.world_size
        return RepeatSampler(len(dataset), group, self.reuse, self.args.seed)

    def policy_lm(self, model):
        model = self.accelerator.unwrap_model(model)
        return getattr(model, "pretrained_model", model)

    def sample(self, model, inputs, num_return: int):
        cfg = self.tunekit_config
        samples = generate(
            self.policy_lm(model),
            inputs["input_ids"],
            inputs["attention_mask"],
            num_return=num_return,
            max_new_tokens=cfg.generation_max_new_tokens,
            temperature=cfg.rollout_temperature,
            stop_ids=self.stop_ids,
            pad_id=self.processing_class.pad_token_id,
        )
        prompts = [p for p in inputs["prompt_text"] for _ in range(num_return)]
        refs = [r for r in inputs["reference"] for _ in range(num_return)]
        completions = decode_completions(self.processing_class, samples)
        rewards = compute_rewards(
            samples, prompts, refs, completions, self.reward_fns, self.reward_model, self.processing_class.pad_token_id
        )
        return samples, rewards

    def rollout_for(self, model, inputs):
        """The batch's rollout: reused from the cache for the ``reuse`` optimizer steps of one rollout, fresh in
        eval."""
        rollout = self.cache.get(inputs["input_ids"]) if model.training else None
        if rollout is None:
            rollout = self.make_rollout(model, inputs)
            if model.training:
                self.cache.put(inputs["input_ids"], rollout)
        return rollout

    def reference_token_logps(self, model, samples: Samples) -> torch.Tensor:
        with torch.no_grad(), reference_forward(model, self.ref_model) as ref:
            return response_logps(lm_logits(ref, samples), samples, self.tunekit_config.rollout_temperature)


class GRPOTrainer(RolloutTrainerBase):
    def __init__(self, *args, **kwargs):
        self.reuse = kwargs["tunekit_config"].grpo_iterations
        super().__init__(*args, **kwargs)

    def make_rollout(self, model, inputs) -> GRPORollout:
        cfg = self.tunekit_config
        samples, rewards = self.sample(model, inputs, cfg.num_generations)
        old = ref = None
        with torch.no_grad():
            if self.reuse > 1:
                old = response_logps(lm_logits(model, samples), samples, cfg.rollout_temperature)
            if cfg.grpo_beta > 0:
                ref = self.reference_token_logps(model, samples)
        return GRPORollout(samples, old, ref, group_advantages(rewards, cfg.num_generations), rewards)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        cfg = self.tunekit_config
        rollout = self.rollout_for(model, inputs)
        s = rollout.samples
        logps = response_logps(lm_logits(model, s), s, cfg.rollout_temperature)
        old = rollout.old_logps if rollout.old_logps is not None else logps.detach()
        losses, kl = grpo_loss(
            logps, old, rollout.ref_logps, rollout.advantages, s.response_mask, cfg.grpo_beta, cfg.cliprange
        )
        ratio = torch.exp(logps.detach() - old)
        clipped = ((ratio < 1 - cfg.cliprange) | (ratio > 1 + cfg.cliprange)).float()
        self.store_metrics(
            {
                "rewards/mean": rollout.rewards.mean(),
                "rewards/std": rollout.rewards.std() if len(rollout.rewards) > 1 else 0.0,
                "completions/mean_length": s.response_mask.sum(1).float().mean(),
                "objective/kl": kl.mean(),
                "objective/clipfrac": masked_mean(clipped, s.response_mask),
            }
        )
        loss = losses.mean()
        return (loss, {"losses": losses}) if return_outputs else loss


def build_trainer(cfg: Config, args, model, tokenizer, data, callbacks):
    fns, reward_model = load_reward_functions(cfg.reward_funcs), load_reward_model(cfg)
    check_rewards(cfg, fns, reward_model)
    ref_model = load_reference(cfg, tokenizer) if cfg.grpo_beta > 0 else None
    return GRPOTrainer(
        model=model,
        args=args,
        train_dataset=data.train,
        eval_dataset=data.eval,
        data_collator=PromptCollator(pad_token_id=tokenizer.pad_token_id),
        processing_class=tokenizer,
        callbacks=callbacks,
        tunekit_config=cfg,
        ref_model=ref_model,
        reward_fns=fns,
        reward_model=reward_model,
        stop_ids=rollout_stop_ids(model, tokenizer, data.template),
    )
