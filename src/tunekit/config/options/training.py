"""Training hyper-parameters and checkpointing, under Hugging Face TrainingArguments' names."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ..problems import Problem, Said, problem
from .base import OptionGroup
from .facts import option

if TYPE_CHECKING:  # annotations only: the schema combines this group
    from ..schema import Config


class TrainingOptions(OptionGroup):
    GROUP = "training"
    TITLE = "Hyper-parameters"

    learning_rate: float = Field(5e-5, gt=0, description="Peak learning rate.")
    num_train_epochs: float = Field(3.0, gt=0, description="Epochs over the training data (fractions allowed).")
    max_steps: int = Field(
        -1,
        description="Stop after this many optimizer steps (overrides num_train_epochs); -1: train for "
        "num_train_epochs.",
    )
    per_device_train_batch_size: int = Field(8, ge=1, description="Micro-batch size per device.")
    per_device_eval_batch_size: int = Field(8, ge=1, description="Evaluation batch size per device.")
    gradient_accumulation_steps: int = Field(1, ge=1, description="Micro-batches accumulated per optimizer step.")
    lr_scheduler_type: Literal[
        "linear",
        "cosine",
        "cosine_with_restarts",
        "polynomial",
        "constant",
        "constant_with_warmup",
        "inverse_sqrt",
        "reduce_lr_on_plateau",
        "cosine_with_min_lr",
        "warmup_stable_decay",
    ] = Field("linear", description="Learning-rate schedule after warm-up.")
    lr_scheduler_kwargs: dict[str, Any] | None = Field(
        None, description="Extra arguments of the scheduler (e.g. {min_lr_rate: 0.1})."
    )
    warmup_steps: float = Field(
        0,
        ge=0,
        description="Linear warm-up steps (wins over warmup_ratio when > 0); a fraction below 1 "
        "is a share of the total steps, as in transformers 5 (LLaMA-Factory's examples write warmup_steps: 0.1).",
    )
    warmup_ratio: float = Field(0.0, ge=0, le=1, description="Warm-up as a share of total steps.")
    optim: str = Field(
        "adamw_torch_fused",
        description="Optimizer, any name Hugging Face accepts (adamw_torch_fused = one fused kernel, Hugging Face's "
        "default; adamw_torch, sgd, adafactor, adamw_bnb_8bit, ...).",
    )
    weight_decay: float = Field(0.0, ge=0, description="Decoupled weight decay.")
    adam_beta1: float = Field(0.9, ge=0, lt=1, description="Adam beta1.")
    adam_beta2: float = Field(0.999, ge=0, lt=1, description="Adam beta2.")
    adam_epsilon: float = Field(1e-8, ge=0, description="Adam epsilon.")
    max_grad_norm: float = Field(1.0, ge=0, description="Clip gradients to this global norm (0 = no clipping).")
    neftune_noise_alpha: float | None = Field(
        None,
        ge=0,
        description="NEFTune: while training, add uniform noise in +-alpha/sqrt(L x d) to the input embeddings (L "
        "tokens per row of the batch, d the hidden size; transformers' Trainer hook, evaluation and generation see "
        "none); the paper uses 5 to 15. Stages sft and pt; dpo and kto when the reference sees no noise (ref_model, "
        "precompute_ref_log_probs, or full / freeze / oft). Empty or 0: off.",
    )
    seed: int = Field(42, description="Random seed for initialisation, shuffling and the validation split.")
    data_seed: int | None = Field(None, description="Seed for data shuffling only (default: seed).")
    bf16: bool = Field(
        False,
        description="bfloat16 mixed precision. Unset, the device decides (docs/memory-model.md, "
        "Precision): on for GPUs of compute capability 8.0+ and CPUs with native bf16 (AVX512_BF16/AMX); "
        "on other CPUs bf16 is emulated and several times slower than fp32. Written false: fp32.",
    )
    fp16: bool = Field(
        False,
        description="float16 mixed precision with loss scaling (GPU). Unset, the device decides: on "
        "for GPUs older than compute capability 8.0 (no bf16), except with fsdp.",
    )
    tf32: bool | None = Field(None, description="Allow TF32 matmuls on Ampere+ GPUs.")
    use_cpu: bool = Field(False, description="Train on the CPU even if a GPU is visible.")
    dataloader_num_workers: int = Field(0, ge=0, description="Worker processes for the data loader.")
    dataloader_pin_memory: bool = Field(True, description="Pin host memory for faster GPU copies.")
    ddp_timeout: int = Field(1800, ge=1, description="Seconds a rank waits for the others before failing.")
    include_num_input_tokens_seen: bool = Field(
        True, description="Count the input tokens seen (logged as num_input_tokens_seen)."
    )

    # evaluation
    eval_strategy: Literal["no", "steps", "epoch"] = Field(
        "no",
        description="When to evaluate during training (also read under its former "
        "name evaluation_strategy, as older LLaMA-Factory examples write it).",
    )
    eval_steps: float | None = Field(None, gt=0, description="Evaluate every N steps (default: logging_steps).")

    # output and checkpoints
    output_dir: str | None = Field(None, description="Where the model, checkpoints, logs and plots go.")
    overwrite_output_dir: bool = Field(False, description="Allow writing into a non-empty output_dir.")
    save_strategy: Literal["no", "steps", "epoch"] = Field("steps", description="When to save a checkpoint.")
    save_steps: float = Field(500, gt=0, description="Save a checkpoint every N steps.")
    save_total_limit: int | None = Field(
        None,
        ge=1,
        description="Keep at most this many checkpoints (oldest deleted first, only after the new one is complete; "
        "the best one with load_best_model_at_end is kept too).",
    )
    save_only_model: bool = Field(
        False, description="Checkpoints without optimizer/scheduler state (cannot resume exactly)."
    )
    resume_from_checkpoint: bool | Literal["auto"] | str | None = Field(
        None,
        description="Resume from a checkpoint folder; true: the newest good checkpoint in output_dir (error if none); "
        "auto: the same, or start fresh when there is none (for commands run again and again, e.g. preemptible "
        "queues). A checkpoint of a run with other training options is refused, and a finished run is never "
        "trained again.",
    )
    load_best_model_at_end: bool = Field(
        False, description="Reload the checkpoint with the best eval metric at the end."
    )
    metric_for_best_model: str | None = Field(None, description="Metric for load_best_model_at_end (default: loss).")

    # speed
    torch_compile: bool = option(False, description="Compile the model with torch.compile.", section="acceleration")
    trained_tokens_loss: bool = Field(
        True,
        description="Run the LM head and cross-entropy only on trained (labelled) tokens: same loss, less compute and "
        "no full-vocabulary logits for prompt and padding (sft, pt).",
    )
    chunked_lm_loss: bool = Field(
        True,
        description="With trained_tokens_loss: run the LM head and cross-entropy a chunk of tokens at a time, "
        "gradients in the same pass, so the tokens x vocabulary logits are never held whole (same loss; falls back to "
        "the plain path for models that change the head's output, e.g. logit soft-capping). In dpo and kto: the "
        "answers' log-probs (policy and reference), the same way.",
    )
    auto_fit: bool = Field(
        False,
        description="Before training, let the planner choose batch size, accumulation, checkpointing and ZeRO to "
        "fit the GPU.",
    )


def output_problems(cfg: Config) -> Iterator[Problem]:
    """output_dir must be a folder of its own: training into the model's, an adapter's or the data's folder mixes the
    run's files with what it loads (a full run's save replaces the base weights). Compared as folders (``m`` and
    ``/abs/m`` are one), and only for a folder that exists here (a hub id is not a folder).
    ``Config._check_combinations`` calls it."""
    if not cfg.output_dir:
        return
    out = Path(cfg.output_dir).expanduser().resolve()
    loaded = [("model_name_or_path", cfg.model_name_or_path)]
    loaded += [("adapter_name_or_path", a) for a in cfg.adapter_paths]
    # the data folder too: the run's files would land among the data and its dataset_info.json
    loaded.append(("dataset_dir", cfg.dataset_dir))
    for name, path in loaded:
        if path and Path(path).expanduser().is_dir() and Path(path).expanduser().resolve() == out:
            yield problem("output_is_loaded", ("output_dir", name), output_dir=cfg.output_dir, name=name, path=path)


def schedule_problems(cfg: Config) -> Iterator[Problem]:
    """``max_steps`` and the warm-up: counts a run can take, and one way to give the warm-up."""
    if cfg.max_steps == 0 or cfg.max_steps < -1:  # the Trainer would run one step for 0 and show "1/0"
        yield problem("max_steps_invalid", ("max_steps",), steps=cfg.max_steps)
    if cfg.warmup_steps >= 1 and cfg.warmup_steps != int(cfg.warmup_steps):
        yield problem("warmup_steps_invalid", ("warmup_steps",), steps=cfg.warmup_steps)
    if 0 < cfg.warmup_steps < 1 and cfg.warmup_ratio:
        yield problem("warmup_steps_and_ratio", ("warmup_steps", "warmup_ratio"))


# Why NEFTune is refused in these stages: what the Trainer's embedding hook would do there (train/stages).
_NEFTUNE_REFUSED = ("rm", "ppo", "grpo")  # the why of each: part_neftune_<stage> in config/problem_texts.py
_REFERENCE_FREE = ("orpo", "simpo")  # dpo's losses without a reference (train/stages/dpo.py: REFERENCE_FREE)


def neftune_problems(cfg: Config) -> Iterator[Problem]:
    """NEFTune (Jain et al. 2023, "NEFTune: Noisy Embeddings Improve Instruction Finetuning"): transformers' Trainer
    hooks the policy's input embeddings in every stage. In rm, ppo and grpo that breaks or biases the update; in dpo
    and kto it is sound where the reference sees no noise: a ``ref_model`` or the frozen copy of full / freeze / oft
    runs (loaded in eval mode), or ``precompute_ref_log_probs`` (computed in eval mode before training). An adapter
    run's own reference (its adapter disabled, in training mode) would be noised too."""
    if not cfg.neftune_noise_alpha:
        return
    if cfg.stage in _NEFTUNE_REFUSED:
        why = Said(f"part_neftune_{cfg.stage}")
        yield problem("neftune_stage", ("neftune_noise_alpha", "stage"), stage=cfg.stage, why=why)
    elif cfg.stage in ("dpo", "kto") and _reference_is_the_policy(cfg):
        yield problem(
            "neftune_reference",
            ("neftune_noise_alpha", "stage", "ref_model", "precompute_ref_log_probs"),
            stage=cfg.stage,
            method=cfg.finetuning_type,
        )


def _reference_is_the_policy(cfg: Config) -> bool:
    """dpo/kto whose reference log-probs come from the training policy itself during training."""
    if cfg.stage == "dpo" and cfg.pref_loss in _REFERENCE_FREE:
        return False
    return not (cfg.ref_model or cfg.precompute_ref_log_probs or cfg.finetuning_type in ("full", "freeze", "oft"))


def evaluation_problems(cfg: Config) -> Iterator[Problem]:
    """Held-out data, evaluation and the best checkpoint."""
    if cfg.val_size >= 1 and cfg.val_size != int(cfg.val_size):
        yield problem("val_size_invalid", ("val_size",), size=cfg.val_size)
    if cfg.val_size > 0 and cfg.eval_dataset:
        yield problem("val_size_and_eval_dataset", ("val_size", "eval_dataset"))
    if cfg.eval_strategy != "no" and cfg.val_size == 0 and not cfg.eval_dataset and cfg.do_train:
        yield problem("eval_needs_data", ("eval_strategy", "val_size", "eval_dataset"), strategy=cfg.eval_strategy)
    if cfg.load_best_model_at_end and cfg.eval_strategy == "no":
        yield problem("best_needs_eval", ("load_best_model_at_end", "eval_strategy"))
    if cfg.load_best_model_at_end and cfg.eval_strategy != cfg.save_strategy:
        yield problem(
            "best_needs_same_strategy",
            ("load_best_model_at_end", "save_strategy", "eval_strategy"),
            save=cfg.save_strategy,
            eval=cfg.eval_strategy,
        )
    yield from _step_problems(cfg)


def _step_problems(cfg: Config) -> Iterator[Problem]:
    """The rules Hugging Face's TrainingArguments applies to the step options when training starts, here so that the
    board (and `tunekit plan`) refuse them too."""
    for name, counted in (
        ("logging_steps", True),
        ("eval_steps", cfg.eval_strategy == "steps"),
        ("save_steps", cfg.save_strategy == "steps"),
    ):
        value = getattr(cfg, name)
        if counted and value is not None and value > 1 and value != int(value):
            yield problem("steps_invalid", (name,), name=name, value=value, whole=int(value))
    every = cfg.eval_steps or cfg.logging_steps  # Hugging Face evaluates every logging_steps without eval_steps
    if (
        cfg.load_best_model_at_end
        and cfg.eval_strategy == cfg.save_strategy == "steps"
        and not _saves_at_evaluations(cfg.save_steps, every)
    ):
        yield problem(
            "best_needs_save_at_eval",
            ("load_best_model_at_end", "save_steps", "eval_steps"),
            save=cfg.save_steps,
            every=every,
            tail=None if cfg.eval_steps else Said("part_eval_every_logging"),
        )
    if cfg.lr_scheduler_type == "reduce_lr_on_plateau" and cfg.eval_strategy == "no":
        yield problem("plateau_needs_eval", ("lr_scheduler_type", "eval_strategy"))


def _saves_at_evaluations(save_steps: float, eval_steps: float) -> bool:
    """Hugging Face's test (TrainingArguments.__post_init__), fractions and mixed kinds included."""
    if save_steps % eval_steps == 0:
        return True
    if save_steps < 1 and eval_steps < 1:
        return (save_steps * 1_000_000) % (eval_steps * 1_000_000) == 0
    return False


# Arguments Hugging Face's get_scheduler passes itself (or that resuming restores): not for lr_scheduler_kwargs.
_SCHEDULER_OWN_ARGS = {"self", "optimizer", "num_warmup_steps", "num_training_steps", "last_epoch"}


def scheduler_kwargs_problems(scheduler: str, kwargs: dict) -> Iterator[Problem]:
    """Check lr_scheduler_kwargs' keys against the signature of the function Hugging Face builds ``scheduler`` with
    (imported only when lr_scheduler_kwargs is given: it imports torch)."""
    from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION, SchedulerType

    if scheduler in ("constant", "constant_with_warmup"):  # get_scheduler passes them no extra arguments
        yield problem(
            "scheduler_takes_no_kwargs",
            ("lr_scheduler_kwargs", "lr_scheduler_type"),
            scheduler=scheduler,
            names=tuple(map(str, kwargs)),
        )
        return
    if scheduler == "reduce_lr_on_plateau":
        from torch.optim.lr_scheduler import ReduceLROnPlateau as function
    else:
        function = TYPE_TO_SCHEDULER_FUNCTION[SchedulerType(scheduler)]
    params = inspect.signature(function).parameters
    allowed = [
        n
        for n, p in params.items()
        if n not in _SCHEDULER_OWN_ARGS and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    wrong = [str(k) for k in kwargs if k not in allowed]
    if wrong:
        takes = Said("part_scheduler_takes", allowed=tuple(allowed)) if allowed else Said("part_scheduler_takes_none")
        yield problem(
            "scheduler_kwargs_wrong",
            ("lr_scheduler_kwargs", "lr_scheduler_type"),
            wrong=tuple(wrong),
            scheduler=scheduler,
            takes=takes,
        )
