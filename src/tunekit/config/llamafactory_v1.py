"""LLaMA-Factory v1 configs (its ``examples/v1/``), read unchanged as tunekit options.

LLaMA-Factory's v1 trainer (``src/llamafactory/v1/config/``) has its own option names: ``model``, ``train_dataset``
(a dataset list YAML, a file or a hub id), ``micro_batch_size`` / ``global_batch_size``, and plugin blocks
(``peft_config``, ``dist_config``, ``kernel_config``, ``quant_config``, ``init_config``, ``optim_config``, each a
mapping with a ``name``). A config file with one of its distinctive keys (:data:`DISTINCT`) is read here: every key is
mapped onto tunekit's options or refused by name with what tunekit lacks; nothing is dropped. Where v1's default
differs from tunekit's and changes what is trained (full fine-tuning without ``peft_config``, learning rate 1e-4,
micro-batch 1, a constant learning rate, torch AdamW's weight decay 0.01, the model's own chat template), the v1
default is written out, so the run is the one v1 would make. The plugin blocks are read in
``llamafactory_v1_plugins.py``.

The mapping is kept with the :class:`~tunekit.config.schema.Config` (:func:`attach`) and written into the run's
``tunekit_config.yaml`` as a comment above each option it set (:func:`notes_of`), and shown by
``tunekit train CONFIG --print-config``.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..env import env_nodes, env_world_size
from ..errors import ConfigError
from .llamafactory_options import LLAMAFACTORY_OPTIONS
from .llamafactory_v1_data import read_dataset
from .llamafactory_v1_plugins import PLUGINS, V1Reader, shown
from .problems import Said, problems_text
from .schema import Config

MODEL_KEYS = (
    "model",
    "custom_chat_template",
    "trust_remote_code",
    "flash_attn",
    "model_class",
    "init_config",
    "peft_config",
    "kernel_config",
    "quant_config",
)
DATA_KEYS = ("train_dataset", "eval_dataset")
TRAINING_KEYS = (
    "output_dir",
    "micro_batch_size",
    "global_batch_size",
    "cutoff_len",
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "max_grad_norm",
    "bf16",
    "batching_strategy",
    "batching_workers",
    "enable_activation_checkpointing",
    "dist_config",
    "dp_size",
    "cp_size",
    "cp_mode",
    "mp_replicate_size",
    "mp_shard_size",
    "dist_timeout",
    "optim_config",
    "lr_scheduler_config",
    "seed",
    "full_determinism",
    "resume_from_checkpoint",
    "save_steps",
    "save_epochs",
    "save_ckpt_as_hf",
    "save_total_limit",
    "logging_steps",
    "pref_loss",
    "pref_beta",
    "pref_ftx",
    "simpo_gamma",
    "dpo_label_smoothing",
    "ld_alpha",
)
SAMPLE_KEYS = ("sample_backend", "max_new_tokens")
#: every option of v1's ModelArguments, DataArguments, TrainingArguments and SampleArguments
V1_KEYS = MODEL_KEYS + DATA_KEYS + TRAINING_KEYS + SAMPLE_KEYS
#: keys only a v1 config has (neither tunekit's options nor LLaMA-Factory v0's): one of them marks a file as v1
DISTINCT = tuple(key for key in V1_KEYS if key not in Config.model_fields and key not in LLAMAFACTORY_OPTIONS)
SAME_NAME = (
    "trust_remote_code",
    "cutoff_len",
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "max_grad_norm",
    "bf16",
    "batching_strategy",
    "seed",
    "resume_from_checkpoint",
    "save_total_limit",
    "logging_steps",
    "pref_loss",
    "pref_beta",
    "pref_ftx",
    "simpo_gamma",
    "dpo_label_smoothing",
    "max_new_tokens",
    "output_dir",
)
RENAMED = {
    "model": "model_name_or_path",
    "micro_batch_size": "per_device_train_batch_size",
    "batching_workers": "dataloader_num_workers",
    "dist_timeout": "ddp_timeout",
    "enable_activation_checkpointing": "gradient_checkpointing",
}
FLASH_ATTN = {"eager": "eager", "sdpa": "sdpa", "flash_attention_2": "fa2"}
SAMPLE_BACKENDS = {"hf": "huggingface", "vllm": "vllm"}
#: v1's defaults that differ from tunekit's and change the run: (tunekit option, value, v1 key that sets it, why)
V1_DEFAULTS = (
    ("model_name_or_path", "Qwen/Qwen3-4B-Instruct-2507", "model", "v1's default model"),
    ("learning_rate", 1e-4, "learning_rate", "v1's default learning_rate"),
    ("per_device_train_batch_size", 1, "micro_batch_size", "v1's default micro_batch_size"),
    ("finetuning_type", "full", "peft_config", "no peft_config: v1 trains every weight"),
    ("template", "jinja", "", "v1 renders with the model's own chat template"),
    ("lr_scheduler_type", "constant", "lr_scheduler_config", "no lr_scheduler_config: v1 keeps the rate constant"),
    ("weight_decay", 0.01, "optim_config", "no optim_config: v1 runs torch.optim.AdamW with its weight decay 0.01"),
    ("logging_steps", 1, "logging_steps", "v1's default logging_steps"),
    ("save_strategy", "no", "save_steps", "no save_steps / save_epochs: v1 saves the model at the end only"),
    ("max_new_tokens", 128, "max_new_tokens", "v1's default max_new_tokens"),
)
IDENTITY = ("model_name_or_path", "dataset", "output_dir")  # the options that tell one loaded v1 run from another
_KEPT = 8
_RECENT: list[tuple[dict[str, Any], dict[str, str]]] = []  # (mapped options, notes) of the v1 configs loaded last


@dataclass
class V1Config:
    """A v1 file read as tunekit options: ``options`` (with a note each), the command line's tunekit ``overrides``
    (its v1 keys are read with the file's), and ``remarks``: v1 keys that need no tunekit option, and why."""

    path: str
    options: dict[str, Any]
    notes: dict[str, str]
    remarks: list[str] = field(default_factory=list)
    overrides: dict[str, Any] = field(default_factory=dict)

    def sources(self) -> dict[str, str]:
        return {k: f"in {self.path} as LLaMA-Factory v1 {self.notes[k]}" for k in self.options}


def is_v1_config(values: Mapping[str, Any]) -> bool:
    """A config file in LLaMA-Factory's v1 format: it has a key only v1 has (``model``, ``train_dataset``, ...)."""
    return any(key in values for key in DISTINCT)


def data_parallel_processes() -> tuple[int, str]:
    """``(processes, how it was found)``: the data-parallel size v1 divides ``global_batch_size`` by. Each training
    process reads torchrun's ``WORLD_SIZE``; before the launch, ``NPROC_PER_NODE`` x ``NNODES`` (tunekit's launcher
    reads the same), else one process."""
    world = env_world_size()
    if world:
        return world, Said("part_v1_how_world_size")
    raw = os.environ.get("NPROC_PER_NODE", "").strip()
    if not raw:
        return 1, Said("part_v1_how_one")
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"NPROC_PER_NODE={raw!r} is not a whole number of at least 1.")
    return int(raw) * env_nodes(), Said("part_v1_how_nproc")


def read_v1_config(
    values: Mapping[str, Any],
    path: str | Path,
    overrides: Mapping[str, Any] = (),
) -> V1Config:
    """Map the v1 file ``values`` (and the command line's v1 keys among ``overrides``, which win, as v1's
    ``key=value`` arguments do) onto tunekit's options; every key tunekit cannot honour is a problem naming it and
    the file, all of them raised together as one :class:`ConfigError`."""
    overrides = dict(overrides)
    values = {**values, **{k: overrides.pop(k) for k in list(overrides) if k in V1_KEYS}}
    reader = V1Reader(values, str(path), data_parallel_processes())
    _unknown_keys(reader)
    for key, value in values.items():
        if value is None or key not in V1_KEYS:
            continue  # null is v1's default for every key it allows null for
        if key in PLUGINS:
            PLUGINS[key](reader, value)
        elif key in SAME_NAME or key in RENAMED:
            reader.set(RENAMED.get(key, key), value, f"`{key}: {shown(value)}`")
        else:
            _special(reader, key, value)
    _defaults(reader, overrides)
    if reader.problems:
        raise ConfigError(problems_text(reader.problems), reader.problems)
    return V1Config(str(path), reader.options, reader.notes, reader.remarks, overrides)


def _unknown_keys(reader: V1Reader) -> None:
    marks = tuple(f"`{k}`" for k in DISTINCT if k in reader.values)
    for key in reader.values:
        if key in V1_KEYS:
            continue
        hint = difflib.get_close_matches(str(key), V1_KEYS, n=3, cutoff=0.75)
        own = key in Config.model_fields
        message = Said(
            "v1_unknown_option",
            key=str(key),
            path=reader.path,
            marks=marks,
            hint=Said("part_did_you_mean", names=tuple(hint)) if hint else None,
            own=Said("part_v1_own_option", key=str(key)) if own else None,
        )
        reader.problem(str(key), message)


def _special(reader: V1Reader, key: str, value: Any) -> None:
    """The keys whose value is translated, checked against what tunekit does, or read as a dataset."""
    if key in DATA_KEYS:
        read_dataset(reader, key, value)
    elif key == "flash_attn":
        reader.choice(key, value, FLASH_ATTN, "flash_attn")
    elif key == "sample_backend":
        reader.choice(key, value, SAMPLE_BACKENDS, "infer_backend")
    elif key == "global_batch_size":
        _global_batch(reader, value)
    elif key == "save_steps":
        reader.set("save_strategy", "steps", f"`save_steps: {shown(value)}`")
        reader.set("save_steps", value, f"`save_steps: {shown(value)}`")
    elif key == "save_epochs":
        if value == 1:
            reader.set("save_strategy", "epoch", "`save_epochs: 1`")
        else:
            reader.refuse(key, value, Said("part_v1_save_epochs"))
    else:
        _parallel_and_flags(reader, key, value)


def _cp_size(reader: V1Reader) -> int:
    """The file's ``cp_size`` where it is a whole number >= 1 (else 1: the key itself is refused)."""
    value = reader.values.get("cp_size", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def _parallel_and_flags(reader: V1Reader, key: str, value: Any) -> None:
    world, how = reader.world
    cp = _cp_size(reader)
    data_parallel = {"dp_size": max(1, world // cp), "mp_shard_size": world}  # FSDP2 shards over all processes
    if key == "cp_size" and cp != value:
        reader.refuse(key, value, Said("part_v1_whole_number"))
    elif key == "cp_size" and value != 1:  # Ulysses context parallelism (train/engines/ulysses.py)
        reader.set("cp_size", value, f"`cp_size: {value}`")
    elif key == "cp_mode" and cp == 1:
        reader.remark(key, value, "no effect with cp_size 1, as in v1")
    elif key == "cp_mode":
        reader.set("cp_mode", value, f"`cp_mode: {shown(value)}`")
    elif key in data_parallel and value != data_parallel[key]:
        groups = Said("part_v1_cp_groups", cp=cp) if cp > 1 else None
        reader.refuse(key, value, Said("part_v1_dp_size", world=world, how=how, key=key, groups=groups))
    elif key in data_parallel:
        reader.remark(
            key,
            value,
            f"equals the {world} processes ({how})" + (f" / cp_size {cp}" if key == "dp_size" and cp > 1 else ""),
        )
    elif key == "mp_replicate_size" and value != 1:
        reader.refuse(key, value, Said("part_v1_mp_replicate"))
    elif key == "mp_replicate_size":
        reader.remark(key, value, "one replica, as tunekit shards")
    elif key == "model_class":
        if value == "llm":
            reader.remark(key, value, "a causal language model, as tunekit trains")
        else:
            reader.refuse(key, value, Said("part_v1_model_class"))
    else:
        _flags(reader, key, value)


def _flags(reader: V1Reader, key: str, value: Any) -> None:
    if key == "full_determinism" and value:
        reader.refuse(key, value, Said("part_v1_full_determinism"))
    elif key == "full_determinism":
        reader.remark(key, value, "v1's default")
    elif key == "save_ckpt_as_hf":
        reader.remark(key, value, "tunekit's checkpoints hold the model in Hugging Face format either way")
    elif key == "ld_alpha":
        reader.refuse(key, value, Said("part_v1_ld_alpha"))
    elif key == "custom_chat_template":
        reader.refuse(key, value, Said("part_v1_custom_chat_template"))


def _global_batch(reader: V1Reader, value: Any) -> None:
    """v1: steps of ``global_batch_size`` samples, ``global_batch_size / (processes x micro_batch_size)``
    micro-batches each; it must divide."""
    world, how = reader.world
    world = max(1, world // _cp_size(reader))  # a sequence group of cp_size processes trains one micro-batch
    micro = reader.values.get("micro_batch_size") or 1
    if isinstance(value, bool) or not isinstance(value, int) or not isinstance(micro, int) or value < 1:
        reader.refuse("global_batch_size", value, Said("part_v1_whole_number"))
        return
    processes = Said("part_v1_processes", micro=micro, world=world, how=how)
    if value % (world * micro):
        why = Said("part_v1_global_multiple", processes=processes, product=world * micro)
        reader.refuse("global_batch_size", value, why)
        return
    reader.set(
        "gradient_accumulation_steps", value // (world * micro), f"`global_batch_size: {value}` / ({processes})"
    )


def _defaults(reader: V1Reader, overrides: Mapping[str, Any]) -> None:
    """v1's defaults where tunekit's differ, unless the file, a plugin block or the command line set the option."""
    given = set(reader.values)
    for option, value, v1_key, why in V1_DEFAULTS:
        if option in reader.options or option in overrides or (v1_key and reader.values.get(v1_key) is not None):
            continue
        if option == "save_strategy" and "save_epochs" in given:
            continue
        reader.set(option, value, f"({why})")


def attach(cfg, v1: V1Config) -> None:
    """Remember the mapping of the Config just loaded from ``v1``, for :func:`notes_of` (a run rebuilds its Config
    as it decides precision and checkpointing, so the mapping is kept here, by the values it gave, not on the
    object). Options the command line replaced keep no note."""
    mapped = {k: v for k, v in v1.options.items() if getattr(cfg, k, None) == v}
    notes = {k: f"from LLaMA-Factory v1 {v1.notes[k]}" for k in mapped}
    first = "model_name_or_path" if "model_name_or_path" in notes else next(iter(notes), None)
    if first is not None:
        head = f"read from LLaMA-Factory v1 config {v1.path}"
        if v1.remarks:
            head += "; needing no tunekit option: " + "; ".join(v1.remarks)
        notes[first] = f"{head}\n# {notes[first]}"
    _RECENT.append((mapped, notes))
    del _RECENT[:-_KEPT]


def notes_of(cfg) -> dict[str, str]:
    """``{option: the v1 key that gave it}`` for a Config loaded from a v1 file (or rebuilt from one with the same
    model and output_dir), for each option that still has the mapped value; else ``{}``."""
    for mapped, notes in reversed(_RECENT):
        keys = [k for k in IDENTITY if k in mapped]
        if keys and all(getattr(cfg, k, None) == mapped[k] for k in keys):
            return {k: text for k, text in notes.items() if getattr(cfg, k, None) == mapped[k]}
    return {}
