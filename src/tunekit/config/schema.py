"""The one typed configuration of tunekit.

:class:`Config` is every option group combined. YAML/JSON files, ``key=value`` overrides, CLI flags,
the web board and the docs all go through it. Cross-field rules live in :meth:`Config._check_combinations`
and each one says how to fix the problem.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import model_validator

from .engines import engine_problems
from .lists import split_list
from .options import (
    FREEZE_ONLY,
    GROUPS,
    LORA_ONLY,
    OFT_ONLY,
    SWITCHED,
    DataOptions,
    DistributedOptions,
    ExportOptions,
    InferOptions,
    LoggingOptions,
    MethodOptions,
    ModelOptions,
    OptimizerOptions,
    RLHFOptions,
    TrainingOptions,
)
from .options.data import batching_problems
from .options.multimodal import MultimodalOptions, multimodal_problems
from .options.training import output_problems
from .problems import Problem, ProblemsError, as_problem
from .stages import STAGES, spoken_list, stages_with

KNOWN_TRACKERS = ("none", "tensorboard", "wandb", "swanlab", "mlflow")


# Former names of options that configs users have still write (the loader reads them as the current name):
# Hugging Face renamed evaluation_strategy to eval_strategy in transformers 4.46; LLaMA-Factory's older examples keep it.
FORMER_NAMES = {"evaluation_strategy": "eval_strategy"}


class Config(
    ModelOptions,
    DataOptions,
    MethodOptions,
    TrainingOptions,
    RLHFOptions,
    OptimizerOptions,
    DistributedOptions,
    LoggingOptions,
    ExportOptions,
    InferOptions,
    MultimodalOptions,
):
    """All tunekit options. Build it with :func:`tunekit.config.load_config`."""

    # ---------------------------------------------------------------- derived values
    @property
    def dataset_names(self) -> list[str]:
        return split_list(self.dataset)

    @property
    def eval_dataset_names(self) -> list[str]:
        return split_list(self.eval_dataset)

    @property
    def adapter_paths(self) -> list[str]:
        """``adapter_name_or_path`` split at commas, blanks dropped: the adapters applied in this order."""
        return split_list(self.adapter_name_or_path)

    @property
    def resolved_lora_alpha(self) -> int:
        return self.lora_alpha if self.lora_alpha is not None else 2 * self.lora_rank

    @property
    def use_gradient_checkpointing(self) -> bool:
        """True unless turned off; ``auto`` counts as on until ``tunekit train`` decides it (plan/checkpointing.py)."""
        return self.gradient_checkpointing is not False and not self.disable_gradient_checkpointing

    @property
    def trackers(self) -> list[str]:
        names = [t for t in split_list(self.report_to) if t != "none"]
        if self.use_swanlab and "swanlab" not in names:
            names.append("swanlab")
        return names

    @property
    def use_packing(self) -> bool:
        return self.packing if self.packing is not None else self.stage == "pt"

    # ---------------------------------------------------------------- cross-field rules
    @property
    def warmup(self) -> tuple[int, float]:
        """``(steps, ratio)`` of the warm-up: ``warmup_steps`` below 1 is a ratio (transformers 5), else whole steps."""
        if 0 < self.warmup_steps < 1:
            return 0, float(self.warmup_steps)
        return int(self.warmup_steps), (self.warmup_ratio if not self.warmup_steps else 0.0)

    @model_validator(mode="after")
    def _do_train_default(self) -> Config:
        """LLaMA-Factory's rule (Hugging Face's do_train defaults to false): a config that asks for do_predict or
        do_eval and does not set do_train runs only those (its predict.yaml: do_predict + eval_dataset + an adapter)."""
        if "do_train" not in self.model_fields_set and (self.do_predict or self.do_eval):
            self.__dict__["do_train"] = False  # not an assignment: validate_assignment would run the validators again
        return self

    @model_validator(mode="after")
    def _check_combinations(self) -> Config:
        problems = [as_problem(p) for p in _combination_problems(self)]  # a bare string: a whole-config problem
        if problems:
            raise ProblemsError(problems)  # the loader turns it into a ConfigError carrying the problems
        return self


def run_problems(cfg: Config) -> Iterator[Problem]:
    """Rules of a training run that a config for ``tunekit plan``, ``data stats`` or ``chat`` does not need, so building
    a Config does not apply them: the board's validation (which starts runs) and the stages' trainers do."""
    if cfg.do_train and STAGES[cfg.stage].generation and not split_list(cfg.reward_funcs) and not cfg.reward_model:
        yield Problem(
            f"stage {cfg.stage} needs a reward: set reward_funcs (package.module:function) or reward_model "
            f"(a folder saved by stage rm).",
            ("reward_funcs", "reward_model", "stage"),
        )


def _combination_problems(cfg: Config) -> Iterator[Problem]:
    if cfg.max_steps == 0 or cfg.max_steps < -1:  # the Trainer would run one step for 0 and show "1/0"
        yield Problem(
            f"max_steps {cfg.max_steps} is not a step count: use a positive number of optimizer steps, or -1 "
            "(the default) to train for num_train_epochs.",
            ("max_steps",),
        )
    if cfg.warmup_steps >= 1 and cfg.warmup_steps != int(cfg.warmup_steps):
        yield Problem(
            f"warmup_steps {cfg.warmup_steps} is neither a fraction below 1 (a share of the steps) nor a whole step count: use e.g. 0.1 or 100.",
            ("warmup_steps",),
        )
    if 0 < cfg.warmup_steps < 1 and cfg.warmup_ratio:
        yield Problem(
            "warmup_steps is a fraction (a ratio) and warmup_ratio is set too: keep one of them.",
            ("warmup_steps", "warmup_ratio"),
        )
    # "given" = set and different from the default, so a saved resolved config (every option written out) reloads.
    given = {k for k in cfg.model_fields_set if getattr(cfg, k) != type(cfg).model_fields[k].default}
    if cfg.bf16 and cfg.fp16:
        yield Problem(
            "bf16 and fp16 are both true: choose one mixed-precision mode (bf16 on Ampere or newer GPUs, else fp16).",
            ("bf16", "fp16"),
        )
    yield from _method_problems(cfg, given)
    if cfg.export_quantization_method == "bnb" and cfg.export_quantization_dataset:
        yield Problem(
            "export_quantization_dataset is GPTQ's calibration data, but export_quantization_method is bnb (data-free, it "
            "would not be used): remove export_quantization_dataset, or set export_quantization_method: gptq.",
            ("export_quantization_dataset", "export_quantization_method"),
        )
    yield from _evaluation_problems(cfg)
    if cfg.deepspeed and cfg.fsdp:
        yield Problem("deepspeed and fsdp are both set: choose one distributed engine.", ("deepspeed", "fsdp"))
    if cfg.mask_history and cfg.train_on_prompt:
        yield Problem(
            "mask_history and train_on_prompt contradict each other: mask_history trains only the last answer, train_on_prompt trains everything.",
            ("mask_history", "train_on_prompt"),
        )
    if (
        "gradient_checkpointing" in given
        and "disable_gradient_checkpointing" in given
        and cfg.gradient_checkpointing is cfg.disable_gradient_checkpointing
    ):
        yield Problem(
            "gradient_checkpointing and disable_gradient_checkpointing disagree: set only one of them.",
            ("gradient_checkpointing", "disable_gradient_checkpointing"),
        )
    unknown_trackers = [t for t in split_list(cfg.report_to) if t not in KNOWN_TRACKERS]
    if unknown_trackers:
        yield Problem(
            f"report_to names unknown tracker(s) {', '.join(unknown_trackers)}: use {', '.join(KNOWN_TRACKERS)}.",
            ("report_to",),
        )
    if cfg.neat_packing and not cfg.use_packing:
        yield Problem("neat_packing needs packing: set packing: true.", ("neat_packing", "packing"))
    if cfg.neat_packing and cfg.stage == "pt":
        yield Problem(
            "neat_packing is for sft: pt packing cuts one continuous text into cutoff_len blocks, so there are no samples to keep apart; remove neat_packing.",
            ("neat_packing", "stage"),
        )
    if cfg.interleave_probs and cfg.mix_strategy == "concat":
        yield Problem(
            "interleave_probs is set but mix_strategy is concat: set mix_strategy: interleave_under or interleave_over.",
            ("interleave_probs", "mix_strategy"),
        )
    if not STAGES[cfg.stage].packing and cfg.use_packing:
        yield Problem(
            f"packing is not supported for stage {cfg.stage}: remove packing (it is only for {spoken_list(stages_with('packing'))}).",
            ("packing", "stage"),
        )
    if cfg.padding_free and not STAGES[cfg.stage].padding_free:
        yield Problem(
            f"padding_free is not supported for stage {cfg.stage}: remove padding_free (it is only for {spoken_list(stages_with('padding_free'))}).",
            ("padding_free", "stage"),
        )
    yield from batching_problems(cfg)  # padding_free with packing, max_tokens_per_batch (config/options/data.py)
    yield from output_problems(
        cfg
    )  # output_dir is not the model's or an adapter's folder (config/options/training.py)
    for key in ("dataset", "eval_dataset"):  # "a,,a": LLaMA-Factory stops on the empty name; never dropped silently
        text = getattr(cfg, key)
        if isinstance(text, str) and text.strip() and any(not part.strip() for part in text.split(",")):
            yield Problem(f"{key} {text!r} has an empty name between commas: remove the extra comma.", (key,))
    for name in ("per_device_train_batch_size", "per_device_eval_batch_size"):
        tokens = getattr(cfg, name) * cfg.cutoff_len
        if tokens > MAX_MICRO_BATCH_TOKENS:
            yield Problem(
                f"{name} {getattr(cfg, name)} x cutoff_len {cfg.cutoff_len} = {tokens:,} tokens in one micro-batch, more "
                f"than {MAX_MICRO_BATCH_TOKENS:,} (2**31 - 1): kernels index a batch's elements with 32-bit integers and "
                f"no device holds its activations; use a smaller {name} (and gradient_accumulation_steps for a "
                f"larger effective batch).",
                (name, "cutoff_len"),
            )
    if cfg.lr_scheduler_kwargs:
        yield from _scheduler_kwargs_problems(cfg.lr_scheduler_type, cfg.lr_scheduler_kwargs)
    yield from _optimizer_problems(cfg, given)
    yield from multimodal_problems(cfg)
    yield from engine_problems(cfg)  # fsdp words; fsdp with rm/ppo/grpo, fp16, do_predict (config/engines.py)


def _optimizer_problems(cfg: Config, given: set[str]) -> Iterator[Problem]:
    """Rules of the optimizers-and-methods group (config/options/optimizers.py), as LLaMA-Factory enforces them."""
    for switch, dependents in SWITCHED.items():
        orphans = [k for k in dependents if k in given]
        if orphans and not getattr(cfg, switch):
            yield Problem(
                f"{', '.join(orphans)} only {'takes' if len(orphans) == 1 else 'take'} effect with {switch}: true: set {switch}: true or remove {'it' if len(orphans) == 1 else 'them'}.",
                (*orphans, switch),
            )
    if cfg.finetuning_type != "oft":
        oft_given = [k for k in OFT_ONLY if k in given]
        if oft_given:
            yield Problem(
                f"{', '.join(oft_given)} {'is an OFT option' if len(oft_given) == 1 else 'are OFT options'} but finetuning_type is "
                f"'{cfg.finetuning_type}': set finetuning_type: oft or remove {'it' if len(oft_given) == 1 else 'them'}.",
                (*oft_given, "finetuning_type"),
            )
    elif cfg.oft_rank == 0 and cfg.oft_block_size == 0:
        yield Problem(
            "oft_rank and oft_block_size are both 0: set one of them (e.g. oft_block_size: 32), and the other to 0.",
            ("oft_rank", "oft_block_size"),
        )
    elif cfg.oft_rank and cfg.oft_block_size and {"oft_rank", "oft_block_size"} <= given:
        yield Problem(
            f"oft_rank {cfg.oft_rank} and oft_block_size {cfg.oft_block_size} are both set: peft derives one from the other; set the other to 0.",
            ("oft_rank", "oft_block_size"),
        )
    custom = [k for k in ("use_galore", "use_apollo", "use_badam", "use_muon", "use_adam_mini") if getattr(cfg, k)]
    if len(custom) > 1:
        yield Problem(f"{' and '.join(custom)} are all optimizers: choose one.", tuple(custom))
    if custom and cfg.loraplus_lr_ratio:
        yield Problem(
            f"{custom[0]} and loraplus_lr_ratio each build the optimizer: choose one.",
            (custom[0], "loraplus_lr_ratio"),
        )
    projected = [k for k in ("use_galore", "use_apollo", "use_badam") if getattr(cfg, k)]
    if projected and cfg.finetuning_type in ("lora", "oft"):
        yield Problem(
            f"{projected[0]} trains the full weights with less optimizer memory; it cannot be combined with finetuning_type "
            f"'{cfg.finetuning_type}' (adapters are small already): set finetuning_type: full or remove {projected[0]}.",
            (projected[0], "finetuning_type"),
        )
    for name in ("use_galore", "use_apollo"):
        if getattr(cfg, name) and (cfg.deepspeed or cfg.fsdp):
            yield Problem(
                f"{name} keeps its projection per full weight matrix and does not run under {'DeepSpeed' if cfg.deepspeed else 'FSDP'} "
                f"(sharded weights): remove {'deepspeed' if cfg.deepspeed else 'fsdp'}, or use BAdam (use_badam) on one device.",
                (name, "deepspeed" if cfg.deepspeed else "fsdp"),
            )
    for name, layerwise in (("use_galore", "galore_layerwise"), ("use_apollo", "apollo_layerwise")):
        if getattr(cfg, name) and getattr(cfg, layerwise) and cfg.gradient_accumulation_steps != 1:
            yield Problem(
                f"{layerwise} steps each weight inside backward, so gradients cannot be accumulated: set "
                f"gradient_accumulation_steps: 1 (raise per_device_train_batch_size instead) or {layerwise}: false.",
                (layerwise, "gradient_accumulation_steps"),
            )
    yield from _optimizer_pairing_problems(cfg)
    if cfg.use_badam and cfg.fsdp:
        yield Problem(
            "use_badam does not run under FSDP: remove fsdp (BAdam runs on one device).", ("use_badam", "fsdp")
        )
    if cfg.use_badam and cfg.deepspeed:
        # Layer mode under ZeRO-3 ran on 2 CPU ranks but its losses left the one-device run's by ~2e-3 from the second
        # step (AdamW under ZeRO-3: <= 2e-6), cause not found: refused rather than train something that is not BAdam.
        yield Problem(
            "use_badam does not run under DeepSpeed in tunekit: under ZeRO-3 badam's update was found to differ from "
            "its one-device update, and ratio mode does not support DeepSpeed at all. Remove deepspeed (BAdam is made "
            "to fully fine-tune a large model on one GPU), or use deepspeed with AdamW.",
            ("use_badam", "deepspeed"),
        )
    if cfg.use_llama_pro and cfg.finetuning_type != "freeze":
        yield Problem(
            f"use_llama_pro trains only the expanded blocks, with finetuning_type: freeze in tunekit (now '{cfg.finetuning_type}'; "
            f"LoRA on the expanded blocks is not supported yet): set finetuning_type: freeze and freeze_trainable_layers to the number of added blocks.",
            ("use_llama_pro", "finetuning_type"),
        )
    if cfg.pure_bf16 and (cfg.bf16 or cfg.fp16):
        yield Problem(
            "pure_bf16 trains without autocast, so bf16/fp16 mixed precision must be off: remove bf16/fp16 (pure_bf16 loads the weights in bf16 itself).",
            ("pure_bf16", *(k for k in ("bf16", "fp16") if getattr(cfg, k))),
        )
    if cfg.pure_bf16 and cfg.dtype not in ("auto", "bfloat16"):
        yield Problem(
            f"pure_bf16 loads the model in bfloat16, but dtype is {cfg.dtype}: remove dtype or set dtype: bfloat16.",
            ("pure_bf16", "dtype"),
        )
    if cfg.pure_bf16 and str(cfg.deepspeed or "").startswith("z3"):
        yield Problem(
            "pure_bf16 does not run under DeepSpeed ZeRO-3 (it keeps its own fp32 master weights): use bf16: true, or a ZeRO-2 preset.",
            ("pure_bf16", "deepspeed"),
        )
    if cfg.fp8 and cfg.fp8_backend == "msamp":  # LLaMA-Factory's third backend; accelerate's MS-AMP path is not wired
        yield Problem(
            "fp8_backend msamp is not supported: use fp8_backend: torchao (or auto) or te.", ("fp8_backend",)
        )
    if cfg.fp8 and cfg.quantization_bit is not None:
        yield Problem(
            "fp8 and quantization_bit cannot be combined (FP8 training computes in 8 bits; QLoRA stores a 4/8-bit base): remove one.",
            ("fp8", "quantization_bit"),
        )
    if cfg.fp8 and cfg.fp8_enable_fsdp_float8_all_gather and not cfg.fsdp:
        yield Problem(
            "fp8_enable_fsdp_float8_all_gather needs fsdp: set fsdp: full_shard or remove it.",
            ("fp8_enable_fsdp_float8_all_gather", "fsdp"),
        )
    if cfg.fsdp_config and not cfg.fsdp:  # read only under fsdp: alone it would be ignored
        yield Problem(
            "fsdp_config is read only when FSDP runs: set fsdp (e.g. fsdp: full_shard) or remove fsdp_config.",
            ("fsdp_config", "fsdp"),
        )
    losses = [k for k in ("use_dft_loss", "use_eaft_loss", "use_asft_loss") if getattr(cfg, k)]
    if len(losses) > 1:
        yield Problem(f"{' and '.join(losses)} are alternative SFT losses: choose one.", tuple(losses))
    if losses and cfg.stage != "sft":
        yield Problem(
            f"{losses[0]} is an SFT loss (stage sft), but stage is {cfg.stage}: set stage: sft or remove {losses[0]}.",
            (losses[0], "stage"),
        )


def _method_problems(cfg: Config, given: set[str]) -> Iterator[Problem]:
    """Options of one finetuning_type set with another (their ``only=`` fact), and the LoRA variants' rules."""
    if cfg.finetuning_type != "lora":
        lora_given = [k for k in LORA_ONLY if k in given]
        if lora_given:
            yield Problem(
                f"{', '.join(lora_given)} {'is a LoRA option' if len(lora_given) == 1 else 'are LoRA options'} but "
                f"finetuning_type is '{cfg.finetuning_type}': remove {'it' if len(lora_given) == 1 else 'them'} or set finetuning_type: lora.",
                (*lora_given, "finetuning_type"),
            )
    if cfg.finetuning_type != "freeze":
        freeze_given = [k for k in FREEZE_ONLY if k in given]
        if freeze_given:
            yield Problem(
                f"{', '.join(freeze_given)} {'is a freeze option' if len(freeze_given) == 1 else 'are freeze options'} but "
                f"finetuning_type is '{cfg.finetuning_type}': remove {'it' if len(freeze_given) == 1 else 'them'} or set finetuning_type: freeze.",
                (*freeze_given, "finetuning_type"),
            )
    if cfg.quantization_bit is not None and cfg.finetuning_type not in ("lora", "oft"):
        yield Problem(
            f"quantization_bit {cfg.quantization_bit} trains a quantized base, which only works with LoRA (QLoRA) or OFT (QOFT): set finetuning_type: lora or oft, or remove quantization_bit.",
            ("quantization_bit", "finetuning_type"),
        )
    if cfg.use_dora and cfg.pissa_init:
        yield Problem(
            "use_dora and pissa_init cannot be combined: choose one LoRA variant.", ("use_dora", "pissa_init")
        )
    if cfg.pissa_convert and not cfg.pissa_init:
        yield Problem(
            "pissa_convert converts a PiSSA adapter to plain LoRA: set pissa_init: true, or remove pissa_convert.",
            ("pissa_convert", "pissa_init"),
        )
    if cfg.pissa_convert and cfg.additional_target:
        yield Problem(
            "pissa_convert with additional_target: peft's conversion keeps only the LoRA matrices, so the trained "
            f"{cfg.additional_target} would be lost from the saved adapter; remove additional_target or pissa_convert.",
            ("pissa_convert", "additional_target"),
        )


def _evaluation_problems(cfg: Config) -> Iterator[Problem]:
    """Held-out data, evaluation and the best checkpoint."""
    if cfg.val_size >= 1 and cfg.val_size != int(cfg.val_size):
        yield Problem(
            f"val_size {cfg.val_size} is neither a fraction below 1 nor a whole sample count: use e.g. 0.1 or 100.",
            ("val_size",),
        )
    if cfg.val_size > 0 and cfg.eval_dataset:
        yield Problem(
            "val_size and eval_dataset are both set: evaluate on a held-out share (val_size) or on eval_dataset, not both.",
            ("val_size", "eval_dataset"),
        )
    if cfg.eval_strategy != "no" and cfg.val_size == 0 and not cfg.eval_dataset and cfg.do_train:
        yield Problem(
            f"eval_strategy '{cfg.eval_strategy}' needs evaluation data: set val_size (e.g. 0.1) or eval_dataset, or set eval_strategy: no.",
            ("eval_strategy", "val_size", "eval_dataset"),
        )
    if cfg.load_best_model_at_end and cfg.eval_strategy == "no":
        yield Problem(
            "load_best_model_at_end needs evaluation: set eval_strategy: steps (and val_size or eval_dataset).",
            ("load_best_model_at_end", "eval_strategy"),
        )
    if cfg.load_best_model_at_end and cfg.eval_strategy != cfg.save_strategy:
        yield Problem(
            f"load_best_model_at_end needs save_strategy equal to eval_strategy (now {cfg.save_strategy} vs {cfg.eval_strategy}).",
            ("load_best_model_at_end", "save_strategy", "eval_strategy"),
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
            yield Problem(
                f"{name} {value:g} is neither a fraction below 1 (a share of the training steps) nor a whole step "
                f"count: use e.g. {int(value)} or 0.1.",
                (name,),
            )
    every = cfg.eval_steps or cfg.logging_steps  # Hugging Face evaluates every logging_steps without eval_steps
    if (
        cfg.load_best_model_at_end
        and cfg.eval_strategy == cfg.save_strategy == "steps"
        and not _saves_at_evaluations(cfg.save_steps, every)
    ):
        yield Problem(
            f"load_best_model_at_end needs a checkpoint at evaluations: save_steps {cfg.save_steps:g} must be a "
            f"multiple of eval_steps {every:g}{'' if cfg.eval_steps else ' (logging_steps, eval_steps not set)'} "
            f"(both whole step counts or both fractions below 1): set save_steps or eval_steps.",
            ("load_best_model_at_end", "save_steps", "eval_steps"),
        )
    if cfg.lr_scheduler_type == "reduce_lr_on_plateau" and cfg.eval_strategy == "no":
        yield Problem(
            "lr_scheduler_type reduce_lr_on_plateau lowers the learning rate when the evaluation loss stops "
            "improving, so it needs evaluation: set eval_strategy: steps (and val_size or eval_dataset), or "
            "choose another lr_scheduler_type.",
            ("lr_scheduler_type", "eval_strategy"),
        )


def _saves_at_evaluations(save_steps: float, eval_steps: float) -> bool:
    """Hugging Face's test (TrainingArguments.__post_init__), fractions and mixed kinds included."""
    if save_steps % eval_steps == 0:
        return True
    if save_steps < 1 and eval_steps < 1:
        return (save_steps * 1_000_000) % (eval_steps * 1_000_000) == 0
    return False


def _optimizer_pairing_problems(cfg: Config) -> Iterator[Problem]:
    """The optimizers that wrap a torch optimizer take only the ones they are built on (train/optimizers.py builds
    them: GaLoreAdamW / GaLoreAdamW8bit / GaLoreAdafactor, APOLLOAdamW; BAdam's ratio mode has sparse gradients)."""
    optim = cfg.optim.lower()
    if cfg.use_galore and not (optim.startswith(("adamw", "adafactor")) or "8bit" in optim):
        yield Problem(
            f"use_galore works with optim adamw_torch (or adamw_8bit, adafactor), not {cfg.optim}: set optim: adamw_torch.",
            ("use_galore", "optim"),
        )
    if cfg.use_apollo and not optim.startswith("adamw"):
        yield Problem(
            f"use_apollo works with optim adamw_torch, not {cfg.optim}: set optim: adamw_torch.",
            ("use_apollo", "optim"),
        )
    if cfg.use_badam and cfg.badam_mode == "ratio" and cfg.max_grad_norm:
        yield Problem(
            "badam_mode: ratio updates sparse gradients, which torch's gradient clipping cannot norm: "
            "set max_grad_norm: 0 (or use badam_mode: layer).",
            ("badam_mode", "max_grad_norm"),
        )


MAX_MICRO_BATCH_TOKENS = 2**31 - 1
# Arguments Hugging Face's get_scheduler passes itself (or that resuming restores): not for lr_scheduler_kwargs.
_SCHEDULER_OWN_ARGS = {"self", "optimizer", "num_warmup_steps", "num_training_steps", "last_epoch"}


def _scheduler_kwargs_problems(scheduler: str, kwargs: dict) -> Iterator[Problem]:
    """Check lr_scheduler_kwargs' keys against the signature of the function Hugging Face builds ``scheduler`` with
    (imported only when lr_scheduler_kwargs is given: it imports torch)."""
    import inspect

    from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION, SchedulerType

    if scheduler in ("constant", "constant_with_warmup"):  # get_scheduler passes them no extra arguments
        yield Problem(
            f"lr_scheduler_type {scheduler} takes no lr_scheduler_kwargs (Hugging Face ignores them): remove "
            f"lr_scheduler_kwargs ({', '.join(map(str, kwargs))}).",
            ("lr_scheduler_kwargs", "lr_scheduler_type"),
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
        yield Problem(
            f"lr_scheduler_kwargs has {', '.join(wrong)}, which lr_scheduler_type {scheduler} does not take; "
            + (f"it takes: {', '.join(allowed)}." if allowed else "it takes none: remove lr_scheduler_kwargs."),
            ("lr_scheduler_kwargs", "lr_scheduler_type"),
        )


def iter_fields():
    """Yield ``(group_class, name, FieldInfo)`` in display order."""
    for group in GROUPS:
        for name, info in group.model_fields.items():
            yield group, name, info
