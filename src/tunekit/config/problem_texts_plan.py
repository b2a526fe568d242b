"""The English templates of the memory planner's errors the web board can show (``plan/architectures.py``,
``plan/params.py``, ``plan/planner.py``, ``plan/gpus.py``, ``plan/vision.py``): key → template, part of
:data:`tunekit.config.problem_texts.ENGLISH`. The board says each again in Chinese (``webui/problems_zh_plan.py``);
``tunekit plan`` prints the English.

An error carries its message as a :class:`~tunekit.config.problems.Said` (``ModelError(Said(key, ...))``), so the
board's ``say_error`` says it from its key and values. A value in quotes is given as its ``repr`` (a ``str``).
"""

from __future__ import annotations

ENGLISH_PLAN: dict[str, str] = {
    # reading the model's config.json (plan/architectures.py)
    "plan_no_config_json": "Model folder {path} has no config.json: point model_name_or_path at a Hugging Face model "
    "folder, or pass --model-config with a config.json or one of: {names}.",
    "plan_model_unknown": "model_name_or_path {name} is not a folder on disk and not a built-in architecture, so its "
    "config.json is unknown: download the model's config.json and pass --model-config PATH, or use one of: {names}.",
    "plan_config_unreadable": "{path} is not a readable config.json: {error}",
    "plan_no_model_type": "config.json of {name} has no model_type: it is not a Hugging Face model config.",
    "plan_config_invalid": "config.json of {name} is not a valid {model_type} configuration ({error}); fix that "
    "field.",
    "plan_model_type_unknown": "transformers does not know model_type {model_type} ({name}): {error}",
    "plan_cannot_build": "Cannot build {name} ({model_type}) as a causal LM on the meta device: {error}",
    "plan_head_split": "config.json of {name}: hidden_size {hidden} does not split into num_attention_heads {heads} "
    "heads (and no head_dim is given); fix one of them.",
    "plan_no_layers": "{name}: no decoder layers found.",
    # the method's trainable parameters (plan/params.py)
    "plan_lora_target_missing": "lora_target names {missing}, which are not linear layers of {name}; available: "
    "{available} (or lora_target: all).",
    "plan_freeze_layers_range": "freeze_trainable_layers {k} must be between -{n} and {n} (not 0): the model has {n} "
    "layers.",
    "plan_vlm_prompt": "finetuning_type {method} is for text models in tunekit: {name} is a vision-language (or "
    "audio) model; use finetuning_type lora, freeze or full.",
    "plan_vlm_oft": "finetuning_type oft is planned for the language model of the vision-language model {name} only "
    "(its vision tower and projector frozen): set freeze_vision_tower and freeze_multi_modal_projector to true, or "
    "use finetuning_type lora, freeze or full.",
    "plan_additional_target_missing": "additional_target names {target}, which {name} does not have outside its "
    "layers (e.g. embed_tokens, lm_head).",
    "plan_freeze_modules_missing": "freeze_trainable_modules names {missing}, which the layers do not have.",
    "plan_freeze_extra_missing": "freeze_extra_modules names {missing}, which the model does not have (e.g. "
    "embed_tokens, norm, lm_head).",
    # the run (plan/planner.py)
    "plan_positive": "{name} must be a whole number >= 1, got {value}.",
    "plan_shard_fewer": "{what} would shard {trainable} trainable parameter(s) of {name} over {n} GPUs, fewer than "
    "one per GPU: use fewer GPUs (--gpus) or plain data parallelism (remove deepspeed/fsdp).",
    "plan_shard_small": "{what} over {n} GPUs leaves {per_gpu} trainable parameters per GPU for {name}: sharding a "
    "model this small costs more than it saves; use at most {most} GPU(s) or no ZeRO.",
    "plan_val_size_no_train": "val_size {val_size:g} leaves no training samples out of {samples}: use a smaller "
    "val_size.",
    "plan_cp_world": "cp_size {cp} splits each sequence over {cp} processes, but the plan is for {world} "
    "process(es): plan a multiple of {cp} (--gpus per node x --nodes, or NPROC_PER_NODE x NNODES), or remove cp_size.",
    # the model and the GPU on the command line (plan/architectures.py, gpus.py, planner.py, vision.py)
    "plan_model_config_unknown": "--model-config {name} is neither a config.json, a model folder nor a built-in "
    "architecture. Built-in: {names}.",
    "plan_no_model": "No model given: set model_name_or_path in the config or pass --model-config NAME|PATH.",
    "plan_gpu_unknown": "Unknown GPU {name}. Known GPUs: {known}; or give its memory with --gpu-memory GiB.",
    "plan_gpu_memory_positive": "--gpu-memory must be a positive number of GiB, got {memory}.",
    "plan_gpu_both": "Give either --gpu NAME or --gpu-memory GiB, not both.",
    "plan_auto_fit_no_gpu": "--auto-fit needs a GPU to fit into: pass --gpu NAME or --gpu-memory GiB.",
    "plan_auto_fit_nothing": "auto_fit: nothing fits on {gpu} ({memory} GiB): the smallest set-up ({rung}) needs "
    "{short} GiB more{more}. Run `tunekit plan` for the breakdown.",
    "part_fit_more_gpus": ", or {n} GPUs with ZeRO-3",
    "plan_no_video": "the {family} family has no video input: plan without --videos.",
}

# the parts of an auto-fit set-up ("gradient checkpointing + Liger fused loss"): the planner's notes are made of them
# (``plan/fit.py``; ``plan/notes.py`` takes them from here, config being below plan) and plan_auto_fit_nothing says
# one, so they are problem keys too (part of problem_texts.ENGLISH, beside ENGLISH_PLAN: pieces with no words of
# their own)
RUNGS: dict[str, str] = {
    "rung": "{parts}",
    "rung_no_ckpt": "no gradient checkpointing",
    "rung_ckpt": "gradient checkpointing",
    "rung_liger_loss": "Liger fused loss",
}
RUNG_JOINS: dict[str, str] = {"parts": " + "}

# placeholder → how a tuple of values is joined in English (added to problem_texts.JOINS)
JOINS_PLAN: dict[str, str | tuple[str, str]] = {"missing": ", ", "available": ", ", **RUNG_JOINS}
