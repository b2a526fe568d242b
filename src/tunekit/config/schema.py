"""The one typed configuration of tunekit.

:class:`Config` is every option group combined. YAML/JSON files, ``key=value`` overrides, CLI flags,
the web board and the docs all go through it. Cross-field rules live in :meth:`Config._check_combinations`
and each one says how to fix the problem.
"""

from __future__ import annotations

from typing import Iterator

from pydantic import model_validator

from .options import (
    FREEZE_ONLY, GROUPS, LORA_ONLY, DataOptions, DistributedOptions, ExportOptions, InferOptions,
    LoggingOptions, MethodOptions, ModelOptions, RLHFOptions, TrainingOptions,
)

KNOWN_TRACKERS = ("none", "tensorboard", "wandb", "swanlab", "mlflow")


class Config(
    ModelOptions, DataOptions, MethodOptions, TrainingOptions, RLHFOptions,
    DistributedOptions, LoggingOptions, ExportOptions, InferOptions,
):
    """All tunekit options. Build it with :func:`tunekit.config.load_config`."""

    # ---------------------------------------------------------------- derived values
    @property
    def dataset_names(self) -> list[str]:
        return _split(self.dataset)

    @property
    def eval_dataset_names(self) -> list[str]:
        return _split(self.eval_dataset)

    @property
    def resolved_lora_alpha(self) -> int:
        return self.lora_alpha if self.lora_alpha is not None else 2 * self.lora_rank

    @property
    def use_gradient_checkpointing(self) -> bool:
        """True unless turned off; ``auto`` counts as on until ``tunekit train`` decides it (plan/checkpointing.py)."""
        return self.gradient_checkpointing is not False and not self.disable_gradient_checkpointing

    @property
    def trackers(self) -> list[str]:
        names = [t for t in _split(self.report_to) if t != "none"]
        if self.use_swanlab and "swanlab" not in names:
            names.append("swanlab")
        return names

    @property
    def use_packing(self) -> bool:
        return self.packing if self.packing is not None else self.stage == "pt"

    # ---------------------------------------------------------------- cross-field rules
    @model_validator(mode="after")
    def _check_combinations(self) -> "Config":
        problems = list(_combination_problems(self))
        if problems:
            raise ValueError("\n".join(problems))
        return self


def _split(value: str | None) -> list[str]:
    if not value:
        return []
    return [part.strip() for part in str(value).split(",") if part.strip()]


def _combination_problems(cfg: Config) -> Iterator[str]:
    # "given" = set and different from the default, so a saved resolved config (every option written out) reloads.
    given = {k for k in cfg.model_fields_set if getattr(cfg, k) != type(cfg).model_fields[k].default}
    if cfg.bf16 and cfg.fp16:
        yield "bf16 and fp16 are both true: choose one mixed-precision mode (bf16 on Ampere or newer GPUs, else fp16)."
    if cfg.finetuning_type != "lora":
        lora_given = [k for k in LORA_ONLY if k in given]
        if lora_given:
            yield (f"{', '.join(lora_given)} {'is a LoRA option' if len(lora_given) == 1 else 'are LoRA options'} but "
                   f"finetuning_type is '{cfg.finetuning_type}': remove {'it' if len(lora_given) == 1 else 'them'} or set finetuning_type: lora.")
    if cfg.finetuning_type != "freeze":
        freeze_given = [k for k in FREEZE_ONLY if k in given]
        if freeze_given:
            yield (f"{', '.join(freeze_given)} {'is a freeze option' if len(freeze_given) == 1 else 'are freeze options'} but "
                   f"finetuning_type is '{cfg.finetuning_type}': remove {'it' if len(freeze_given) == 1 else 'them'} or set finetuning_type: freeze.")
    if cfg.quantization_bit is not None and cfg.finetuning_type != "lora":
        yield f"quantization_bit {cfg.quantization_bit} trains a quantized base, which only works with LoRA (QLoRA): set finetuning_type: lora or remove quantization_bit."
    if cfg.use_dora and cfg.pissa_init:
        yield "use_dora and pissa_init cannot be combined: choose one LoRA variant."
    if cfg.val_size >= 1 and cfg.val_size != int(cfg.val_size):
        yield f"val_size {cfg.val_size} is neither a fraction below 1 nor a whole sample count: use e.g. 0.1 or 100."
    if cfg.val_size > 0 and cfg.eval_dataset:
        yield "val_size and eval_dataset are both set: evaluate on a held-out share (val_size) or on eval_dataset, not both."
    if cfg.eval_strategy != "no" and cfg.val_size == 0 and not cfg.eval_dataset and cfg.do_train:
        yield f"eval_strategy '{cfg.eval_strategy}' needs evaluation data: set val_size (e.g. 0.1) or eval_dataset, or set eval_strategy: no."
    if cfg.load_best_model_at_end and cfg.eval_strategy == "no":
        yield "load_best_model_at_end needs evaluation: set eval_strategy: steps (and val_size or eval_dataset)."
    if cfg.load_best_model_at_end and cfg.eval_strategy != cfg.save_strategy:
        yield f"load_best_model_at_end needs save_strategy equal to eval_strategy (now {cfg.save_strategy} vs {cfg.eval_strategy})."
    if cfg.deepspeed and cfg.fsdp:
        yield "deepspeed and fsdp are both set: choose one distributed engine."
    if cfg.mask_history and cfg.train_on_prompt:
        yield "mask_history and train_on_prompt contradict each other: mask_history trains only the last answer, train_on_prompt trains everything."
    if "gradient_checkpointing" in given and "disable_gradient_checkpointing" in given and cfg.gradient_checkpointing is cfg.disable_gradient_checkpointing:
        yield "gradient_checkpointing and disable_gradient_checkpointing disagree: set only one of them."
    unknown_trackers = [t for t in _split(cfg.report_to) if t not in KNOWN_TRACKERS]
    if unknown_trackers:
        yield f"report_to names unknown tracker(s) {', '.join(unknown_trackers)}: use {', '.join(KNOWN_TRACKERS)}."
    if cfg.neat_packing and not cfg.use_packing:
        yield "neat_packing needs packing: set packing: true."
    if cfg.neat_packing and cfg.stage == "pt":
        yield "neat_packing is for sft: pt packing cuts one continuous text into cutoff_len blocks, so there are no samples to keep apart; remove neat_packing."
    if cfg.interleave_probs and cfg.mix_strategy == "concat":
        yield "interleave_probs is set but mix_strategy is concat: set mix_strategy: interleave_under or interleave_over."
    if cfg.stage in ("rm", "ppo", "dpo", "kto", "grpo") and cfg.use_packing:
        yield f"packing is not supported for stage {cfg.stage}: remove packing (it is only for pt and sft)."


def iter_fields():
    """Yield ``(group_class, name, FieldInfo)`` in display order."""
    for group in GROUPS:
        for name, info in group.model_fields.items():
            yield group, name, info
