"""Config → ``transformers.TrainingArguments`` (the options keep Hugging Face's names, so this is a mapping, not a
translation)."""

from __future__ import annotations

from ..config.problems import config_error
from ..config.schema import Config
from .engines import distributed
from .fp8 import accelerate_handlers, fp8_recipe
from .machine import check_machine, cpu_has_native_bf16
from .precision import stated_precision


def training_arguments_kwargs(cfg: Config, report_to: list[str]) -> dict:
    import torch

    precision = stated_precision(cfg)  # a run's options carry its precision decision (train/precision.py)

    steps, ratio = cfg.warmup
    warmup = steps if steps > 0 else min(ratio, 0.999999)  # transformers 5: a float below 1 is a ratio
    kwargs = dict(
        output_dir=cfg.output_dir,
        do_train=cfg.do_train,
        do_eval=cfg.do_eval,
        do_predict=cfg.do_predict,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        per_device_eval_batch_size=cfg.per_device_eval_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        learning_rate=cfg.learning_rate,
        num_train_epochs=cfg.num_train_epochs,
        max_steps=cfg.max_steps,
        lr_scheduler_type=cfg.lr_scheduler_type,
        lr_scheduler_kwargs=cfg.lr_scheduler_kwargs or {},
        warmup_steps=warmup,
        optim=cfg.optim,
        weight_decay=cfg.weight_decay,
        adam_beta1=cfg.adam_beta1,
        adam_beta2=cfg.adam_beta2,
        adam_epsilon=cfg.adam_epsilon,
        max_grad_norm=cfg.max_grad_norm,
        neftune_noise_alpha=cfg.neftune_noise_alpha or None,  # the Trainer hooks the input embeddings (0: off)
        seed=cfg.seed,
        data_seed=cfg.data_seed,
        bf16=precision.autocast == "bf16",
        fp16=precision.autocast == "fp16",
        tf32=cfg.tf32,
        use_cpu=cfg.use_cpu,
        dataloader_num_workers=cfg.dataloader_num_workers,
        dataloader_pin_memory=cfg.dataloader_pin_memory and torch.cuda.is_available(),
        ddp_timeout=cfg.ddp_timeout,
        ddp_find_unused_parameters=cfg.ddp_find_unused_parameters,
        ddp_backend=cfg.ddp_backend,
        include_num_input_tokens_seen="non_padding" if cfg.include_num_input_tokens_seen else "no",
        eval_strategy=cfg.eval_strategy,
        eval_steps=cfg.eval_steps,
        save_strategy=cfg.save_strategy,
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        save_only_model=cfg.save_only_model,
        load_best_model_at_end=cfg.load_best_model_at_end,
        metric_for_best_model=cfg.metric_for_best_model,
        logging_steps=cfg.logging_steps,
        logging_first_step=cfg.logging_first_step,
        report_to=report_to or "none",
        run_name=cfg.run_name,
        disable_tqdm=True,  # tunekit's own progress bar (RichProgressCallback)
        remove_unused_columns=False,  # collators pick their columns; `length` stays for length grouping
        train_sampling_strategy="group_by_length" if cfg.group_by_length else "random",
        length_column_name="length",
        torch_compile=cfg.torch_compile,
        use_liger_kernel=cfg.enable_liger_kernel,
        label_names=["labels"],
    )
    kwargs.update(distributed.training_args_kwargs(cfg, cfg.output_dir))  # last: it may override use_cpu
    return kwargs


def _accelerator_available() -> bool:
    import torch

    return (
        torch.cuda.is_available()
        or (hasattr(torch, "xpu") and torch.xpu.is_available())
        or torch.backends.mps.is_available()
    )


def build_training_arguments(cfg: Config, report_to: list[str], **overrides):
    from transformers import TrainingArguments

    check_machine(cfg)  # tunekit train ran all of preflight already; a caller of flow.run_train may not have
    kwargs = training_arguments_kwargs(cfg, report_to)
    if getattr(cfg, "fp8", False):  # before the model loads: the backend's package (train/fp8.py)
        accelerate_handlers(fp8_recipe(cfg))
    if not _accelerator_available():
        if cfg.bf16 and not cpu_has_native_bf16():
            print(
                "note: bf16 on a CPU without native bf16 (AVX512_BF16 / AMX) is several times slower than fp32; "
                "remove bf16 for runs on this CPU.",
                flush=True,
            )
        kwargs["use_cpu"] = True
    kwargs.update(overrides)
    try:
        with distributed.saying("setting up the engine (on GPUs: waiting for every rank to join)"):
            return TrainingArguments(**kwargs)
    except ValueError as exc:  # transformers' own validation of the combination
        raise config_error("train_settings_invalid", error=str(exc)) from None
