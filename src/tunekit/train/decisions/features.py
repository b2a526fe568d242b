"""The memory and speed features of a training run, each decided once for a config and a device.

Each feature is one :class:`Feature`: ``decide(cfg, machine) -> Decision`` (does it apply, and why, in one line),
``memory`` (where the planner counts it) and ``attach`` (what does it in a run). The trainer and the planner read the
same :class:`Decision` from :class:`~tunekit.train.decisions.RunDecisions`; nothing else decides a feature
(``tests/train/test_run_decisions.py`` holds every feature x stage x device kind to that).

On a GPU, a tunekit trick that was never measured there is off unless asked for (``elementwise_recompute: true``): its
saving was measured on 2-core CPUs only. The CPU-host machinery has its own module (``cpu_host.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...config.method_rules import PREFIX_CHECKPOINTING_WHY, checkpointing_auto_off
from ...config.schema import Config
from ..engines.deepspeed_config import CUSTOM_OPTIMIZERS  # the options that build tunekit's own optimizer

LOSS_STAGES = ("sft", "pt")  # the stages whose loss is the LM's token cross-entropy (TrainedTokensLossMixin)
LOGPS_STAGES = ("dpo", "kto")  # the stages whose loss reads sequence log-probs (stages/reference_policy.forward_logps)
REGROUPED_STAGES = ("sft", "pt", "dpo", "rm")  # group_within_step (window_grouping.py; plan/batching.py counts it)


@dataclass(frozen=True)
class Decision:
    """Whether a feature runs, why (one line), and what it needs to know beyond on/off (``detail``)."""

    on: bool
    why: str
    detail: tuple = ()


@dataclass(frozen=True)
class Feature:
    name: str
    decide: Callable  # (cfg, machine) -> Decision
    memory: str  # the planner's term that reads this decision
    attach: str  # what applies it in a run


def on(why: str, *detail) -> Decision:
    return Decision(True, why, tuple(detail))


def off(why: str, *detail) -> Decision:
    return Decision(False, why, tuple(detail))


def _variant_loss(cfg: Config) -> str | None:
    return next((name for name in ("use_dft_loss", "use_eaft_loss", "use_asft_loss") if getattr(cfg, name)), None)


def trained_tokens_loss(cfg: Config, machine) -> Decision:
    """sft/pt: the LM head sees only the trained positions (``train/token_loss.py``)."""
    if cfg.stage not in LOSS_STAGES:
        return off(f"stage {cfg.stage} has its own loss")
    if not cfg.trained_tokens_loss:
        return off("trained_tokens_loss: false")
    if cfg.finetuning_type == "prompt":  # the model's hidden states start with the virtual tokens: peft's own loss
        return off("finetuning_type prompt: the virtual tokens shift the positions; peft pads the labels for them")
    if cfg.torch_compile:
        return off("torch_compile: data-dependent rows break its graphs")
    if cfg.enable_liger_kernel and cfg.cp_size == 1:  # under cp_size the loss is tunekit's (liger_fused_loss)
        return off("enable_liger_kernel: Liger's fused linear cross-entropy computes the loss")
    return on("the LM head only on trained positions")


def chunked_lm_head(cfg: Config, machine) -> Decision:
    """The LM head + loss (sft/pt) or log-probs (dpo/kto) a chunk of tokens at a time (``train/chunked_head.py``)."""
    if cfg.stage in LOSS_STAGES:
        plain = trained_tokens_loss(cfg, machine)
        if not plain.on:
            return off(plain.why)
        if _variant_loss(cfg):
            return off(f"{_variant_loss(cfg)}: the variant's loss reads the trained rows' logits")
        if 0 < cfg.thought_loss_weight < 1:  # train/thought_loss.py
            return off("thought_loss_weight: the weighted loss reads the trained rows' logits")
    elif cfg.stage in LOGPS_STAGES:  # tunekit computes the log-probs itself: Liger's kernels do not change the head
        if cfg.torch_compile:
            return off("torch_compile: data-dependent rows break its graphs")
    else:
        return off(f"stage {cfg.stage} computes no loss over the vocabulary")
    if not cfg.chunked_lm_loss:
        return off("chunked_lm_loss: false")
    return on("the tokens x vocabulary logits are never held whole")


def liger(cfg: Config, machine) -> Decision:
    if not cfg.enable_liger_kernel:
        return off("enable_liger_kernel: false")
    return on("Liger's Triton kernels (RMSNorm, SwiGLU, RoPE) patched in by the HF Trainer")


def liger_fused_loss(cfg: Config, machine) -> Decision:
    """Liger's fused linear cross-entropy computes the loss: only where the model's own forward computes it."""
    if not cfg.enable_liger_kernel:
        return off("enable_liger_kernel: false")
    if cfg.stage not in LOSS_STAGES:
        return off(f"stage {cfg.stage} computes its loss from tunekit's log-probs, not the model's forward")
    if _variant_loss(cfg):
        return off(f"{_variant_loss(cfg)}: the variant's loss reads the logits")
    if cfg.cp_size > 1:  # train/context_parallel.py: each process's loss from its part of the hidden states
        return off("cp_size: tunekit computes each process's loss over its part of the sequence")
    return on("the model's forward computes the loss without the logits")


def elementwise_recompute(cfg: Config, machine) -> Decision:
    """Recipes for the MLP's element-wise outputs and the norm outputs (``model/elementwise_recompute.py``);
    ``detail``: ``(MLP outputs, norm outputs)``. Off by default on a GPU: measured on CPUs only."""
    if not cfg.elementwise_recompute:
        return off("elementwise_recompute: false", False, False)
    if cfg.torch_compile:
        return off("torch_compile: the hooks would break its graphs", False, False)
    if cfg.enable_liger_kernel:
        return off("enable_liger_kernel: its fused SwiGLU keeps gate and up only already", False, False)
    if machine.kind != "cpu" and "elementwise_recompute" not in cfg.model_fields_set:
        return off(
            f"not measured on a {machine.kind.upper()} device yet: opt in with elementwise_recompute: true",
            False,
            False,
        )
    norms = not (cfg.fsdp or cfg.deepspeed)  # the norm weights are gathered for their own forward only when sharded
    return on(
        "recipes instead of the MLP's element-wise outputs"
        + (" and the norm outputs" if norms else " (not the norms: sharded weights)"),
        True,
        norms,
    )


def gradient_checkpointing(cfg: Config, machine) -> Decision:
    """``detail``: ``(lowest layers checkpointed or None for all, auto still to decide)``. ``auto`` is decided from the
    memory plan by the decide step (``plan/decide.py``), which passes its config here already resolved; for ptuning it
    is off without a plan (the schema refuses ``true`` with it: ``config/method_rules.py``)."""
    if checkpointing_auto_off(cfg):
        return off(f"auto: finetuning_type ptuning: {PREFIX_CHECKPOINTING_WHY}", None, False)
    if not cfg.use_gradient_checkpointing:
        return off("gradient_checkpointing: false", None, False)
    if cfg.gradient_checkpointing == "auto":
        return on("auto, not decided yet: planned on until the memory plan decides", None, True)
    layers = cfg.gradient_checkpointing_layers
    return on("all decoder layers" if layers is None else f"the lowest {layers} decoder layers", layers, False)


def checkpointing_is_auto(cfg: Config) -> bool:
    """``gradient_checkpointing: auto`` still to be decided (and not turned off by LLaMA-Factory's spelling)."""
    return gradient_checkpointing(cfg, None).detail[1]


def padding_free(cfg: Config, machine) -> Decision:
    return on("one row per micro-batch, no padding") if cfg.padding_free else off("padding_free: false")


def token_budget(cfg: Config, machine) -> Decision:
    if not cfg.max_tokens_per_batch:
        return off("max_tokens_per_batch not set")
    return on(f"micro-batches of at most {cfg.max_tokens_per_batch} tokens", cfg.max_tokens_per_batch)


def group_within_step(cfg: Config, machine) -> Decision:
    if not cfg.group_within_step:
        return off("group_within_step: false")
    if cfg.group_by_length:
        return off("group_by_length sorts the whole epoch already")
    if cfg.max_tokens_per_batch:
        return off("max_tokens_per_batch: re-dealing rows could break the token budget")
    if cfg.stage not in REGROUPED_STAGES:  # kto: its KL estimate is per micro-batch; ppo/grpo: rollouts
        return off(f"stage {cfg.stage}: its batches are not regrouped")
    return on("an optimizer step's micro-batches re-formed by length")


def fused_optimizer(cfg: Config, machine) -> Decision:
    custom = next((name for name in CUSTOM_OPTIMIZERS if getattr(cfg, name, False)), None)
    if custom:
        return off(f"{custom}: its own optimizer")
    if "fused" not in cfg.optim:
        return off(f"optim {cfg.optim}")
    return on(f"optim {cfg.optim} (Hugging Face's default)")
