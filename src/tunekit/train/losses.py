"""The losses of the preference and RL stages, each with the formula it implements.

Notation: for an answer ``y`` to prompt ``x``, ``log π(y|x) = Σ_t log π(y_t | x, y_<t)`` summed over
the answer's labelled tokens (:func:`sequence_logps`); ``|y|`` is its token count; ``π_ref`` is the
frozen reference policy; ``σ`` the logistic function; ``β`` is ``pref_beta``.
Every function works on per-sample tensors and returns per-sample losses (the trainer averages), so
gradient accumulation over equal micro-batches equals one large batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..data.labels import IGNORE_INDEX


def _at_least_float32(logits: torch.Tensor) -> torch.Tensor:
    """Half-precision logits are upcast for the log-softmax; float64 ones (reference runs) stay float64."""
    return logits if logits.dtype == torch.float64 else logits.float()


def sequence_logps(
    logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Σ_t log p(y_t | y_<t), n)`` per row over the tokens whose label is not -100.

    ``logits[:, t]`` predicts ``labels[:, t + 1]`` (causal shift, as in the HF loss).
    """
    logits = _at_least_float32(logits[:, :-1])
    if temperature != 1.0:
        logits = logits / temperature
    labels = labels[:, 1:]
    mask = labels != IGNORE_INDEX
    token_logps = torch.log_softmax(logits, dim=-1).gather(-1, labels.masked_fill(~mask, 0).unsqueeze(-1)).squeeze(-1)
    return (token_logps * mask).sum(-1), mask.sum(-1)


def token_logps(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``log p(tokens[:, t])`` where ``logits[:, t]`` is the distribution of ``tokens[:, t]`` (already aligned)."""
    logits = _at_least_float32(logits)
    if temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


@dataclass
class PreferenceOutput:
    losses: torch.Tensor  # per pair
    chosen_rewards: torch.Tensor
    rejected_rewards: torch.Tensor


def preference_loss(
    kind: str,
    beta: float,
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor | None,
    ref_rejected: torch.Tensor | None,
    chosen_len: torch.Tensor,
    rejected_len: torch.Tensor,
    label_smoothing: float = 0.0,
    simpo_gamma: float = 0.5,
) -> PreferenceOutput:
    """Per-pair preference losses (sums of log-probs in, losses and implicit rewards out).

    With ``h = [log π(y_w|x) - log π_ref(y_w|x)] - [log π(y_l|x) - log π_ref(y_l|x)]``:

    * ``sigmoid`` (DPO, Rafailov et al. 2023; cDPO label smoothing ε):
      ``L = -(1-ε) log σ(β h) - ε log σ(-β h)``  — equals ln 2 when π = π_ref.
    * ``hinge`` (SLiC, Zhao et al. 2023): ``L = max(0, 1 - β h)`` — equals 1 when π = π_ref.
    * ``ipo`` (Azar et al. 2023), on length-averaged log-probs ``h̄``: ``L = (h̄ - 1/(2β))²`` — equals 1/(4β²) when π =
      π_ref.
    * ``orpo`` (Hong et al. 2024), reference-free, ``ℓ = log π(y|x)/|y|``:
      ``L = -ℓ_w - β log σ(log odds(y_w) - log odds(y_l))``, ``log odds(y) = ℓ - log(1 - e^ℓ)``.
    * ``simpo`` (Meng et al. 2024), reference-free: ``L = -log σ(β ℓ_w - β ℓ_l - γ)``.

    Implicit rewards (logged as rewards/chosen, rewards/rejected): ``β (log π - log π_ref)`` for the
    reference-based losses (length-averaged for ipo), ``β ℓ`` for orpo and simpo.
    """
    if kind in ("orpo", "simpo"):
        lw, ll = policy_chosen / chosen_len, policy_rejected / rejected_len
        if kind == "orpo":
            log_odds = (lw - ll) - (
                torch.log1p(-torch.exp(lw).clamp(max=1 - 1e-6)) - torch.log1p(-torch.exp(ll).clamp(max=1 - 1e-6))
            )
            losses = -lw - beta * F.logsigmoid(log_odds)
        else:
            losses = -F.logsigmoid(beta * (lw - ll) - simpo_gamma)
        return PreferenceOutput(losses, (beta * lw).detach(), (beta * ll).detach())
    if ref_chosen is None or ref_rejected is None:
        raise ValueError(f"pref_loss {kind} needs reference log-probs")
    chosen_ratio, rejected_ratio = policy_chosen - ref_chosen, policy_rejected - ref_rejected
    if kind == "ipo":
        chosen_ratio, rejected_ratio = chosen_ratio / chosen_len, rejected_ratio / rejected_len
    h = chosen_ratio - rejected_ratio
    if kind == "sigmoid":
        losses = -(1 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)
    elif kind == "hinge":
        losses = torch.relu(1 - beta * h)
    elif kind == "ipo":
        losses = (h - 1 / (2 * beta)) ** 2
    else:
        raise ValueError(f"unknown pref_loss {kind}")
    return PreferenceOutput(losses, (beta * chosen_ratio).detach(), (beta * rejected_ratio).detach())


def pairwise_reward_loss(chosen_scores: torch.Tensor, rejected_scores: torch.Tensor) -> torch.Tensor:
    """Reward-model loss (Bradley-Terry, Ouyang et al. 2022): ``L = -log σ(r(x, y_w) - r(x, y_l))`` per pair."""
    return -F.logsigmoid(chosen_scores - rejected_scores)


def kto_loss(
    policy: torch.Tensor,
    ref: torch.Tensor,
    desirable: torch.Tensor,
    kl: torch.Tensor,
    beta: float,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """KTO (Ethayarajh et al. 2024), per example; returns ``(losses, rewards)``.

    ``r = log π(y|x) - log π_ref(y|x)``, ``z₀ = max(0, KL estimate)`` (no gradient), then
    ``L = λ_D (1 - σ(β (r - z₀)))`` for desirable and ``L = λ_U (1 - σ(β (z₀ - r)))`` for undesirable examples.
    The KL estimate is the mean of ``log π - log π_ref`` over mismatched (prompt, answer) pairs of the batch.
    """
    z0 = kl.detach().clamp(min=0)
    rewards = policy - ref
    losses = torch.where(
        desirable,
        desirable_weight * (1 - torch.sigmoid(beta * (rewards - z0))),
        undesirable_weight * (1 - torch.sigmoid(beta * (z0 - rewards))),
    )
    return losses, (beta * rewards).detach()


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    out = (x - mean) * torch.rsqrt(var + 1e-8)
    return out if shift_mean else out + mean


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) over the response tokens.

    ``δ_t = r_t + γ V_{t+1} - V_t``, ``A_t = δ_t + γ λ A_{t+1}`` (``V`` after the last token is 0),
    returns ``R_t = A_t + V_t``. ``mask`` marks real response tokens; padding gets 0.
    """
    values = values * mask
    rewards = rewards * mask
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[:, 0])
    steps = rewards.shape[1]
    for t in reversed(range(steps)):
        next_value = values[:, t + 1] if t + 1 < steps else torch.zeros_like(last)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        last = delta + gamma * lam * last
        last = last * mask[:, t]
        advantages[:, t] = last
    return advantages, advantages + values


def ppo_losses(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    cliprange: float,
    cliprange_value: float,
) -> dict[str, torch.Tensor]:
    """PPO-clip (Schulman et al. 2017) for the policy, clipped value loss, per token, averaged over response tokens.

    ``ρ_t = exp(log π(a_t) - log π_old(a_t))``,
    ``L_π = mean_t max(-A_t ρ_t, -A_t clip(ρ_t, 1-ε, 1+ε))``,
    ``L_V = ½ mean_t max((V_t - R_t)², (clip(V_t, V_old - ε_v, V_old + ε_v) - R_t)²)``.
    """
    ratio = torch.exp(logps - old_logps)
    pg1 = -advantages * ratio
    pg2 = -advantages * torch.clamp(ratio, 1 - cliprange, 1 + cliprange)
    policy_loss = masked_mean(torch.max(pg1, pg2), mask)
    clipped_values = old_values + torch.clamp(values - old_values, -cliprange_value, cliprange_value)
    value_loss = 0.5 * masked_mean(torch.max((values - returns) ** 2, (clipped_values - returns) ** 2), mask)
    clipfrac = masked_mean((pg2 > pg1).float(), mask)
    return {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "clipfrac": clipfrac.detach(),
        "approx_kl": masked_mean(0.5 * (logps - old_logps) ** 2, mask).detach(),
    }


def group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """GRPO's group-relative advantage (Shao et al. 2024): ``A_i = (r_i - mean(r_group)) / (std(r_group) + 1e-4)``."""
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(1, keepdim=True)
    std = grouped.std(1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
    return ((grouped - mean) / (std + 1e-4)).view(-1)


def grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    ref_logps: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
    cliprange: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO objective (Shao et al. 2024, eq. 3), negated; returns ``(loss per sequence, KL per sequence)``.

    ``L_i = -1/|o_i| Σ_t [min(ρ_t A_i, clip(ρ_t, 1-ε, 1+ε) A_i) - β D_t]``, with
    ``D_t = π_ref/π - log(π_ref/π) - 1`` (the unbiased k3 estimator of KL(π ‖ π_ref)).
    """
    ratio = torch.exp(logps - old_logps)
    adv = advantages.unsqueeze(1)
    objective = torch.min(ratio * adv, torch.clamp(ratio, 1 - cliprange, 1 + cliprange) * adv)
    if ref_logps is not None:
        kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
        objective = objective - beta * kl
    else:
        kl = torch.zeros_like(logps)
    return -masked_mean(objective, mask, dim=1), masked_mean(kl, mask, dim=1).detach()


def sft_token_losses(
    logits: torch.Tensor,
    targets: torch.Tensor,
    kind: str | None = None,
    alpha: float = 1.0,
    ref_logits: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token SFT losses ``w_t · CE_t`` on already-aligned rows (``logits[i]`` predicts ``targets[i]``), 16-bit
    upcast to fp32.

    ``CE_t = -log p(y_t)``; the weight ``w_t`` carries no gradient (computed under ``no_grad``, as in LLaMA-Factory's
    ``trainer_utils``):

    * ``None`` (plain SFT): ``w_t = 1``.
    * ``dft`` (Dynamic Fine-Tuning, Wu et al. 2025): ``w_t = p(y_t) = exp(-CE_t)``.
    * ``eaft`` (entropy-adaptive fine-tuning): ``w_t = (H̃_t / 3)^alpha``, where ``H̃_t`` is the entropy of the
      softmax over the 20 largest logits at that position (renormalised among themselves; 3 ≈ ln 20, its maximum).
    * ``asft`` (anchored SFT, LLaMA-Factory's ``asft_loss_func``): the DFT term plus ``alpha`` (``asft_alpha``) times
      the token's KL divergence from the frozen reference, ``p(y_t)·CE_t + alpha · KL(π_ref(·|t) ‖ π(·|t))`` with
      ``KL = Σ_v q_v (log q_v - log p_v)``, ``q = softmax(ref_logits)``; the KL term keeps its gradient.
      ``ref_logits`` are the reference's logits on the same rows. LLaMA-Factory averages both terms over a
      micro-batch's trained tokens; averaging their sum is the same number.

    The caller sums and divides by the step's trained-token count (or takes the mean), like the plain loss.
    """
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    ce = F.cross_entropy(logits, targets, reduction="none")
    if kind is None:
        return ce
    with torch.no_grad():
        if kind in ("dft", "asft"):
            weight = torch.exp(-ce)
        elif kind == "eaft":
            top = torch.topk(logits, k=min(20, logits.shape[-1]), dim=-1).values
            logp = top - torch.logsumexp(top, dim=-1, keepdim=True)
            weight = torch.pow(-(logp.exp() * logp).sum(-1) / 3.0, alpha)
        else:
            raise ValueError(f"unknown SFT loss {kind}")
    if kind == "asft":
        if ref_logits is None:
            raise ValueError("the asft loss needs the reference's logits (ref_logits)")
        ref_logp = F.log_softmax(ref_logits.to(logits.dtype), dim=-1)
        kl = F.kl_div(F.log_softmax(logits, dim=-1), ref_logp, reduction="none", log_target=True).sum(-1)
        return ce * weight + alpha * kl
    return ce * weight
