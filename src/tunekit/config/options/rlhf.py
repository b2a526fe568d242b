"""Preference and reinforcement-learning options (stages rm, dpo, kto, ppo, grpo); formulas in tunekit.train.losses."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import OptionGroup
from .facts import option


class RLHFOptions(OptionGroup):
    GROUP = "rlhf"
    TITLE = "RLHF and preference"

    pref_beta: float = Field(
        0.1, ge=0, description="Beta of the preference loss (strength of the KL anchor to the reference)."
    )
    pref_ftx: float = Field(
        0.0, ge=0, description="Weight of an SFT loss on the chosen answer mixed into the DPO loss."
    )
    pref_loss: Literal["sigmoid", "hinge", "ipo", "orpo", "simpo"] = Field(
        "sigmoid", description="Preference loss: sigmoid (DPO), hinge, ipo, orpo, simpo."
    )
    dpo_label_smoothing: float = Field(0.0, ge=0, le=0.5, description="Label smoothing of the sigmoid loss (cDPO).")
    simpo_gamma: float = Field(0.5, description="Target reward margin of SimPO.")
    kto_chosen_weight: float = Field(1.0, gt=0, description="KTO weight of desirable examples.")
    kto_rejected_weight: float = Field(1.0, gt=0, description="KTO weight of undesirable examples.")
    ref_model: str | None = Field(
        None, description="Reference model path (default: the frozen base; with LoRA the adapter is disabled)."
    )
    ref_model_adapters: str | None = Field(None, description="Adapters of the reference model.")
    precompute_ref_log_probs: bool = Field(
        False, description="Compute the reference log-probs once before training (frees the reference from memory)."
    )
    reward_model: str | None = Field(None, description="Reward model folder for ppo/grpo.")
    reward_model_adapters: str | None = Field(None, description="Adapters of the reward model.")
    reward_model_type: Literal["lora", "full"] = Field(
        "full", description="Whether reward_model is a LoRA adapter on the policy base or a full model."
    )
    reward_funcs: str | None = Field(
        None,
        description="Reward function(s) for grpo/ppo as dotted paths (package.module:function), comma-separated, "
        "summed; called as fn(prompts=[...], completions=[...], reference=[...]) -> list of floats.",
    )
    num_generations: int = Field(4, ge=2, description="GRPO: completions sampled per prompt.")
    ppo_epochs: int = Field(4, ge=1, description="PPO: optimisation epochs per batch of rollouts.")
    ppo_buffer_size: int = option(
        1,
        ge=1,
        description="PPO: LLaMA-Factory's rollout buffer; tunekit rolls out each micro-batch and reuses it "
        "ppo_epochs times.",
        status="ignored",
    )
    ppo_target: float = Field(6.0, description="PPO: target KL of the adaptive KL controller.")
    ppo_score_norm: bool = Field(False, description="PPO: normalise scores.")
    ppo_whiten_rewards: bool = Field(False, description="PPO: whiten rewards before computing advantages.")
    cliprange: float = Field(0.2, gt=0, description="PPO/GRPO: policy ratio clip range.")
    cliprange_value: float = Field(0.2, gt=0, description="PPO: value clip range.")
    gamma: float = Field(1.0, description="PPO: discount.")
    lam: float = Field(0.95, description="PPO: GAE lambda.")
    vf_coef: float = Field(0.1, ge=0, description="PPO: value loss coefficient.")
    grpo_beta: float = Field(0.04, ge=0, description="GRPO: KL coefficient against the reference.")
    grpo_iterations: int = Field(
        1,
        ge=1,
        description="GRPO: optimizer steps per rollout (>1 reuses it off-policy; the clipping then bounds "
        "the update).",
    )
    ppo_kl_coef: float = Field(
        0.05,
        ge=0,
        description="PPO: initial coefficient of the per-token KL penalty against the reference (adapted towards "
        "ppo_target).",
    )
    ppo_adaptive_kl: bool = Field(
        True, description="PPO: adapt the KL coefficient towards ppo_target (Ziegler et al. 2019)."
    )
    rollout_temperature: float = Field(
        1.0, gt=0, description="PPO/GRPO: sampling temperature of rollouts (top_p 1, no top_k)."
    )
    generation_max_new_tokens: int = Field(64, ge=1, description="PPO/GRPO: tokens generated per rollout.")
