"""Stage ``ppo``: RLHF with proximal policy optimisation (Ouyang et al. 2022; Schulman et al. 2017).

tunekit's own implementation (TRL removed its PPO trainer), following "The N+ implementation details
of RLHF with PPO" (Huang et al. 2024):

1. **Rollout** (no gradient): sample a completion per prompt (:mod:`tunekit.train.stages.rollout`), score it
   (reward functions and/or a reward model: ``s``), and record ``log π_old(a_t)``, ``V_old(s_t)``
   from the policy + value head and ``log π_ref(a_t)`` from the reference.
2. **Rewards per token**: ``r_t = -c_KL (log π_old(a_t) - log π_ref(a_t))``, plus ``s`` on the last
   completion token. ``c_KL`` starts at ``ppo_kl_coef`` and, with ``ppo_adaptive_kl``, follows
   Ziegler et al. 2019: ``c ← c (1 + clip(KL/ppo_target - 1, ±0.2) · N/10000)``.
3. **Advantages**: GAE (``gamma``, ``lam``; :func:`tunekit.train.losses.gae`), whitened over the batch;
   returns ``R_t = A_t + V_old(s_t)``.
4. **Update** ``ppo_epochs`` optimizer steps on the rollout: clipped policy loss (``cliprange``) +
   ``vf_coef`` x clipped value loss (``cliprange_value``) — :func:`tunekit.train.losses.ppo_losses`.

The critic is a value head on the policy's own backbone (:class:`~tunekit.train.stages.value_head.ValueHeadModel`),
saved as ``value_head.safetensors`` next to the model / adapter.

Logged: rewards/mean, rewards/std, completions/mean_length, objective/kl, objective/kl_coef,
ppo/policy_loss, ppo/value_loss, ppo/clipfrac, ppo/approx_kl.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...config.schema import Config
from ...model.loader import load_model as load_lm
from ..batching import PromptCollator
from ..losses import gae, masked_mean, masked_whiten, ppo_losses
from .grpo import RolloutTrainerBase
from .reference_policy import load_reference
from .rollout import Samples, check_rewards, load_reward_functions, load_reward_model, response_logps, rollout_stop_ids
from .value_head import with_value_head

KL_HORIZON = 10000


def load_model(cfg: Config, tokenizer):

    return with_value_head(load_lm(cfg, tokenizer, is_trainable=cfg.do_train), cfg)


@dataclass
class PPORollout:
    samples: Samples
    old_logps: torch.Tensor
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    scores: torch.Tensor  # as rewarded, before ppo_score_norm
    kl: torch.Tensor


def policy_forward(model, samples: Samples, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    logits, values = model(samples.sequences, attention_mask=samples.attention_mask, position_ids=samples.position_ids)
    return response_logps(logits, samples, temperature), values[:, samples.prompt_width - 1 : -1].float()


class PPOTrainer(RolloutTrainerBase):
    def __init__(self, *args, **kwargs):
        cfg = kwargs["tunekit_config"]
        self.reuse = cfg.ppo_epochs
        self.kl_coef = cfg.ppo_kl_coef
        super().__init__(*args, **kwargs)

    def make_rollout(self, model, inputs) -> PPORollout:
        cfg = self.tunekit_config
        samples, scores = self.sample(model, inputs, 1)
        mask = samples.response_mask
        with torch.no_grad():
            old_logps, old_values = policy_forward(model, samples, cfg.rollout_temperature)
            ref_logps = self.reference_token_logps(model, samples)
        raw_scores = scores
        if cfg.ppo_score_norm and scores.numel() > 1:
            scores = (scores - scores.mean()) / (scores.std() + 1e-8)
        kl = (old_logps - ref_logps) * mask
        rewards = -self.kl_coef * kl
        last = (mask.sum(1) - 1).clamp(min=0)
        rewards[torch.arange(len(last)), last] += scores.to(rewards)
        if cfg.ppo_whiten_rewards:
            rewards = masked_whiten(rewards, mask, shift_mean=False)
        advantages, returns = gae(rewards, old_values, mask, cfg.gamma, cfg.lam)
        advantages = masked_whiten(advantages, mask) * mask
        seq_kl = kl.sum(1).mean()
        if cfg.ppo_adaptive_kl and model.training:
            error = torch.clamp(seq_kl / cfg.ppo_target - 1, -0.2, 0.2).item()
            self.kl_coef *= 1 + error * len(last) / KL_HORIZON
        return PPORollout(samples, old_logps, old_values, advantages, returns, raw_scores, kl.sum(1))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        cfg = self.tunekit_config
        rollout = self.rollout_for(model, inputs)
        s = rollout.samples
        logps, values = policy_forward(model, s, cfg.rollout_temperature)
        parts = ppo_losses(
            logps,
            rollout.old_logps,
            rollout.advantages,
            values,
            rollout.old_values,
            rollout.returns,
            s.response_mask,
            cfg.cliprange,
            cfg.cliprange_value,
        )
        loss = parts["policy_loss"] + cfg.vf_coef * parts["value_loss"]
        self.store_metrics(
            {
                "rewards/mean": rollout.scores.mean(),
                "rewards/std": rollout.scores.std() if len(rollout.scores) > 1 else 0.0,
                "completions/mean_length": s.response_mask.sum(1).float().mean(),
                "objective/kl": rollout.kl.mean(),
                "objective/kl_coef": self.kl_coef,
                "ppo/policy_loss": parts["policy_loss"].detach(),
                "ppo/value_loss": parts["value_loss"].detach(),
                "ppo/clipfrac": parts["clipfrac"],
                "ppo/approx_kl": parts["approx_kl"],
                "ppo/values": masked_mean(values.detach(), s.response_mask),
            }
        )
        return (loss, parts) if return_outputs else loss


def build_trainer(cfg: Config, args, model, tokenizer, data, callbacks):
    fns, reward_model = load_reward_functions(cfg.reward_funcs), load_reward_model(cfg)
    check_rewards(cfg, fns, reward_model)
    return PPOTrainer(
        model=model,
        args=args,
        train_dataset=data.train,
        eval_dataset=data.eval,
        data_collator=PromptCollator(pad_token_id=tokenizer.pad_token_id),
        processing_class=tokenizer,
        callbacks=callbacks,
        tunekit_config=cfg,
        ref_model=load_reference(cfg, tokenizer),
        reward_fns=fns,
        reward_model=reward_model,
        stop_ids=rollout_stop_ids(model, tokenizer, data.template),
    )
