"""Training hyper-parameters and checkpointing, under Hugging Face TrainingArguments' names."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ..problems import Problem
from .base import OptionGroup
from .facts import option


class TrainingOptions(OptionGroup):
    GROUP = "training"
    TITLE = "Hyper-parameters"

    learning_rate: float = Field(5e-5, gt=0, description="Peak learning rate.")
    num_train_epochs: float = Field(3.0, gt=0, description="Epochs over the training data (fractions allowed).")
    max_steps: int = Field(
        -1,
        description="Stop after this many optimizer steps (overrides num_train_epochs); -1: train for num_train_epochs.",
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
        description="Optimizer, any name Hugging Face accepts (adamw_torch_fused = one fused kernel, Hugging Face's default; adamw_torch, sgd, adafactor, adamw_bnb_8bit, ...).",
    )
    weight_decay: float = Field(0.0, ge=0, description="Decoupled weight decay.")
    adam_beta1: float = Field(0.9, ge=0, lt=1, description="Adam beta1.")
    adam_beta2: float = Field(0.999, ge=0, lt=1, description="Adam beta2.")
    adam_epsilon: float = Field(1e-8, ge=0, description="Adam epsilon.")
    max_grad_norm: float = Field(1.0, ge=0, description="Clip gradients to this global norm (0 = no clipping).")
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
        description="Keep at most this many checkpoints (oldest deleted first, only after the new one is complete; the best one with load_best_model_at_end is kept too).",
    )
    save_only_model: bool = Field(
        False, description="Checkpoints without optimizer/scheduler state (cannot resume exactly)."
    )
    resume_from_checkpoint: bool | Literal["auto"] | str | None = Field(
        None,
        description="Resume from a checkpoint folder; true: the newest good checkpoint in output_dir (error if none); auto: the same, or start fresh when there is none (for commands run again and again, e.g. preemptible queues). A checkpoint of a run with other training options is refused, and a finished run is never trained again.",
    )
    load_best_model_at_end: bool = Field(
        False, description="Reload the checkpoint with the best eval metric at the end."
    )
    metric_for_best_model: str | None = Field(None, description="Metric for load_best_model_at_end (default: loss).")

    # speed
    torch_compile: bool = option(False, description="Compile the model with torch.compile.", section="acceleration")
    trained_tokens_loss: bool = Field(
        True,
        description="Run the LM head and cross-entropy only on trained (labelled) tokens: same loss, less compute and no full-vocabulary logits for prompt and padding (sft, pt).",
    )
    chunked_lm_loss: bool = Field(
        True,
        description="With trained_tokens_loss: run the LM head and cross-entropy a chunk of tokens at a time, gradients in the same pass, so the tokens x vocabulary logits are never held whole (same loss; falls back to the plain path for models that change the head's output, e.g. logit soft-capping). In dpo and kto: the answers' log-probs (policy and reference), the same way.",
    )
    auto_fit: bool = Field(
        False,
        description="Before training, let the planner choose batch size, accumulation, checkpointing and ZeRO to fit the GPU.",
    )


def output_problems(cfg) -> Iterator[Problem]:
    """output_dir must be a folder of its own: training into the model's, an adapter's or the data's folder mixes the
    run's files with what it loads (a full run's save replaces the base weights). Compared as folders (``m`` and
    ``/abs/m`` are one), and only for a folder that exists here (a hub id is not a folder). ``Config._check_combinations``
    calls it."""
    if not cfg.output_dir:
        return
    out = Path(cfg.output_dir).expanduser().resolve()
    loaded = [("model_name_or_path", cfg.model_name_or_path)] + [
        ("adapter_name_or_path", a) for a in cfg.adapter_paths
    ]
    loaded.append(
        ("dataset_dir", cfg.dataset_dir)
    )  # the run's files would land among the data and its dataset_info.json
    for name, path in loaded:
        if path and Path(path).expanduser().is_dir() and Path(path).expanduser().resolve() == out:
            yield Problem(
                f"output_dir {cfg.output_dir} is the {name} folder {path} itself: the run would write its "
                f"weights and files into the folder it loads; choose a new output_dir.",
                ("output_dir", name),
            )
