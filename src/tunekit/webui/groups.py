"""The Train tab's tutorial groups: LLaMA Board's parameter groups, in its order, each a declared list of options.

The schema stays the source of every option's type, default, choices and rules; a group only says which options a
newcomer sees together and when the group applies. When it applies is read from the option facts where the schema
has them (``config/options/facts.py``): a group of ``only="lora"`` options applies to ``finetuning_type: lora``, a
group of ``needs="use_galore"`` options while ``use_galore`` is on. Only what the schema does not know is declared
here: the stages of the RLHF group, and that the multimodal group is for a vision-language template
(``tunekit.data.mm_plugins.FAMILIES``). A group that does not apply is hidden, unless one of its options is set
away from its default: an option that still counts (or that a rule refuses) stays in sight.

Every option not in a group stays under "Advanced", in its schema section (:mod:`tunekit.webui.sections`).
Nothing here imports gradio.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tunekit.config.engines import DEEPSPEED_PRESETS
from tunekit.config.stages import STAGE_NAMES
from tunekit.data.mm_plugins import FAMILIES

from .fields import FieldSpec, form_to_values, from_form


@dataclass(frozen=True)
class Group:
    name: str  # title key: ``sec_group_<name>`` in i18n.TEXT
    options: tuple[str, ...]
    open: bool = False  # its accordion starts open
    stages: tuple[str, ...] = ()  # shown only for these stages (empty: every stage)
    multimodal: bool = False  # shown only for a vision-language (or audio) template


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


RLHF_STAGES = ("rm", "ppo", "dpo", "kto", "grpo")
assert set(RLHF_STAGES) <= set(STAGE_NAMES)

# LLaMA Board's order: its top bar (model, method, quantization, RoPE, booster), the train tab's rows (data, stage,
# general), then its accordions (extra, freeze, LoRA, RLHF, multimodal, GaLore, APOLLO, BAdam, SwanLab) and the
# output row (output dir, DeepSpeed).
TUTORIAL_GROUPS: tuple[Group, ...] = (
    Group("model", ("model_name_or_path", "adapter_name_or_path", "template"), open=True),
    Group("data", ("dataset_dir", "dataset", "eval_dataset"), open=True),
    Group("stage", ("stage",), open=True),
    Group("method", ("finetuning_type", "use_galore", "use_apollo", "use_badam"), open=True),
    Group("quantization", ("quantization_bit", "quantization_method", "quantization_type", "double_quantization")),
    Group("acceleration", ("flash_attn", "enable_liger_kernel") + (("use_unsloth",) if _installed("unsloth") else ())),
    Group("rope", ("rope_scaling", "rope_scaling_target_len")),
    Group(
        "general",
        (
            "learning_rate",
            "num_train_epochs",
            "max_steps",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "cutoff_len",
            "max_samples",
            "val_size",
            "lr_scheduler_type",
            "max_grad_norm",
            "seed",
            "bf16",
        ),
        open=True,
    ),
    Group(
        "other",
        (
            "logging_steps",
            "save_steps",
            "warmup_steps",
            "neftune_noise_alpha",
            "packing",
            "neat_packing",
            "train_on_prompt",
            "mask_history",
            "resize_vocab",
            "use_llama_pro",
            "enable_thinking",
            "report_to",
        ),
    ),
    Group("freeze", ("freeze_trainable_layers", "freeze_trainable_modules", "freeze_extra_modules"), open=True),
    Group(
        "lora",
        (
            "lora_rank",
            "lora_alpha",
            "lora_dropout",
            "loraplus_lr_ratio",
            "create_new_adapter",
            "use_rslora",
            "use_dora",
            "pissa_init",
            "lora_target",
            "additional_target",
        ),
        open=True,
    ),
    Group(
        "rlhf",
        (
            "pref_beta",
            "pref_ftx",
            "pref_loss",
            "ref_model",
            "reward_model",
            "num_generations",
            "ppo_score_norm",
            "ppo_whiten_rewards",
        ),
        open=True,
        stages=RLHF_STAGES,
    ),
    Group(
        "multimodal",
        (
            "freeze_vision_tower",
            "freeze_multi_modal_projector",
            "freeze_language_model",
            "image_max_pixels",
            "image_min_pixels",
            "video_max_pixels",
            "video_min_pixels",
        ),
        open=True,
        multimodal=True,
    ),
    Group("galore", ("galore_rank", "galore_update_interval", "galore_scale", "galore_target"), open=True),
    Group("apollo", ("apollo_rank", "apollo_update_interval", "apollo_scale", "apollo_target"), open=True),
    Group("badam", ("badam_mode", "badam_switch_mode", "badam_switch_interval", "badam_update_ratio"), open=True),
    Group("output", ("output_dir", "deepspeed"), open=True),
    Group(
        "trackers",
        ("use_swanlab", "swanlab_project", "swanlab_run_name", "swanlab_workspace", "swanlab_api_key", "swanlab_mode"),
    ),
)

# The DeepSpeed field is a choice of tunekit's presets (config/engines.py), LLaMA Board's "stage" and "offload":
# the value is the option's exact value; a JSON path typed or loaded from a YAML stays accepted.
DEEPSPEED_CHOICES = ("", "z2", "z3", "z2_offload", "z3_offload")
assert set(DEEPSPEED_CHOICES[1:]) <= set(DEEPSPEED_PRESETS)
# Free-text options the board offers as a choice of values (their words: labels.CHOICE_WORDS).
WORDED_CHOICES: dict[str, tuple[str, ...]] = {"deepspeed": DEEPSPEED_CHOICES}


def grouped_names(groups: Iterable[Group] = TUTORIAL_GROUPS) -> tuple[str, ...]:
    """Every option of the groups, in display order."""
    return tuple(name for g in groups for name in g.options)


def _shared(specs: list[FieldSpec], fact: str) -> str | None:
    """The value of ``fact`` (``only``, ``needs``) every option of a group declares, else None."""
    values = {getattr(s.facts, fact) for s in specs}
    return values.pop() if len(values) == 1 else None


def condition_fields(group: Group, specs: list[FieldSpec]) -> tuple[str, ...]:
    """The options whose value decides whether ``group`` applies (``specs``: the group's options)."""
    names: list[str] = []
    if group.stages:
        names.append("stage")
    if group.multimodal:
        names.append("template")
    if _shared(specs, "only"):
        names.append("finetuning_type")
    if switch := _shared(specs, "needs"):
        names.append(switch)
    return tuple(names)


def applies(group: Group, specs: list[FieldSpec], values: Mapping[str, Any]) -> bool:
    """Whether ``group`` applies to the config ``values`` (option → config value, defaults filled in)."""
    if group.stages and values.get("stage") not in group.stages:
        return False
    if group.multimodal and values.get("template") not in FAMILIES:
        return False
    method = _shared(specs, "only")
    if method and values.get("finetuning_type") != method:
        return False
    switch = _shared(specs, "needs")
    return not (switch and not values.get(switch))


def visible_groups(
    groups: Iterable[Group], by_name: Mapping[str, FieldSpec], form: Mapping[str, Any]
) -> dict[str, bool]:
    """Group name → shown, for the form values ``form`` (what the widgets hold; a missing option is its default):
    a group is shown when it applies, or when one of its options is set away from its default."""
    values = {name: spec.default if spec.has_default else None for name, spec in by_name.items()}
    values.update({name: from_form(by_name[name], raw) for name, raw in form.items() if name in by_name})
    shown = {}
    for group in groups:
        specs = [by_name[n] for n in group.options if n in by_name]
        changed = form_to_values(specs, {s.name: form[s.name] for s in specs if s.name in form})
        shown[group.name] = bool(changed) or applies(group, specs, values)
    return shown
