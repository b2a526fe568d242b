"""Options given without the fine-tuning method or the switch they belong to, and the methods' own rules.

The ``only=`` / ``needs=`` facts of the option fields (``config/options/facts.py``) say which options belong to LoRA,
OFT, freeze, P-Tuning v2 (``ptuning``), prompt tuning or a switch such as ``use_galore``; these rules refuse such an
option set without its method or switch, so a config never carries a setting that silently does nothing.
``Config._check_combinations`` calls them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from .options import FREEZE_ONLY, LORA_ONLY, OFT_ONLY, SWITCHED, options_only_for
from .options.model import special_token_problems
from .problems import Problem, Said, problem

if TYPE_CHECKING:  # annotations only: the schema imports this module to run its rules
    from .schema import Config


def method_problems(cfg: Config, given: set[str]) -> Iterator[Problem]:
    """Options of one finetuning_type set with another (their ``only=`` fact), and the LoRA variants' rules."""
    if cfg.finetuning_type != "lora":
        lora_given = [k for k in LORA_ONLY if k in given]
        if lora_given:
            yield problem(
                f"lora_only_{_count(lora_given)}",
                (*lora_given, "finetuning_type"),
                names=tuple(lora_given),
                method=cfg.finetuning_type,
            )
    if cfg.finetuning_type != "freeze":
        freeze_given = [k for k in FREEZE_ONLY if k in given]
        if freeze_given:
            yield problem(
                f"freeze_only_{_count(freeze_given)}",
                (*freeze_given, "finetuning_type"),
                names=tuple(freeze_given),
                method=cfg.finetuning_type,
            )
    if cfg.quantization_bit is not None and cfg.finetuning_type not in ("lora", "oft"):
        yield problem("quantization_method", ("quantization_bit", "finetuning_type"), bits=cfg.quantization_bit)
    if cfg.use_dora and cfg.pissa_init:
        yield problem("dora_pissa", ("use_dora", "pissa_init"))
    if cfg.pissa_convert and not cfg.pissa_init:
        yield problem("pissa_convert_needs_init", ("pissa_convert", "pissa_init"))
    yield from prompt_learning_problems(cfg, given)
    if cfg.pissa_convert and cfg.additional_target:
        yield problem("pissa_convert_target", ("pissa_convert", "additional_target"), target=cfg.additional_target)
    if cfg.use_reentrant_gc and "use_reentrant_gc" in given and not cfg.use_gradient_checkpointing:
        off = (  # what turned checkpointing off
            "gradient_checkpointing"
            if cfg.gradient_checkpointing is False
            else "disable_gradient_checkpointing"
            if cfg.disable_gradient_checkpointing
            else "finetuning_type"  # ptuning (checkpointing_auto_off)
        )
        yield problem("reentrant_gc_off", ("use_reentrant_gc", off), option=f"{off}: {getattr(cfg, off)}".lower())
    yield from special_token_problems(cfg)  # new_special_tokens_config, init_special_tokens


def switch_problems(cfg: Config, given: set[str]) -> Iterator[Problem]:
    """Options that take effect only with their switch on (``needs="use_galore"`` & co.), set with it off."""
    for switch, dependents in SWITCHED.items():
        orphans = [k for k in dependents if k in given]
        if orphans and not getattr(cfg, switch):
            yield problem(f"switch_off_{_count(orphans)}", (*orphans, switch), names=tuple(orphans), switch=switch)


def oft_problems(cfg: Config, given: set[str]) -> Iterator[Problem]:
    """OFT's options set with another method, and OFT's two sizes (peft derives one from the other)."""
    if cfg.finetuning_type != "oft":
        oft_given = [k for k in OFT_ONLY if k in given]
        if oft_given:
            yield problem(
                f"oft_only_{_count(oft_given)}",
                (*oft_given, "finetuning_type"),
                names=tuple(oft_given),
                method=cfg.finetuning_type,
            )
    elif cfg.oft_rank == 0 and cfg.oft_block_size == 0:
        yield problem("oft_sizes_zero", ("oft_rank", "oft_block_size"))
    elif cfg.oft_rank and cfg.oft_block_size and {"oft_rank", "oft_block_size"} <= given:
        yield problem("oft_sizes_both", ("oft_rank", "oft_block_size"), rank=cfg.oft_rank, block=cfg.oft_block_size)


def oft_sizes(cfg: Config) -> tuple[int, int]:
    """peft's ``(r, oft_block_size)`` for OFT: peft takes exactly one of the two, so a set ``oft_rank`` wins over
    ``oft_block_size``'s default (both given is refused by :func:`oft_problems`)."""
    return (cfg.oft_rank, 0) if cfg.oft_rank else (0, cfg.oft_block_size)


# P-Tuning v2 and prompt tuning (model/prompt_adapters.py): their options, the stages and features they work with.
PROMPT_METHOD_NAMES = {"ptuning": Said("part_method_ptuning"), "prompt": Said("part_method_prompt")}
# stages whose loss reads each input position's log-prob or score: prompt tuning's virtual tokens shift them
_POSITION_STAGES = {"dpo": Said("part_logprobs"), "kto": Said("part_logprobs"), "rm": Said("part_last_score")}
# why P-Tuning v2 trains without gradient checkpointing: ``gradient_checkpointing: true`` is refused with it (below),
# and ``auto`` decides off for it without a memory plan (``Config.use_gradient_checkpointing``, train/decisions)
PREFIX_CHECKPOINTING_WHY = Said("part_prefix_checkpointing")


def checkpointing_auto_off(cfg: Config) -> bool:
    """``gradient_checkpointing: auto`` with ptuning: off, decided from the config alone (no memory plan)."""
    return (
        cfg.finetuning_type == "ptuning"
        and cfg.gradient_checkpointing == "auto"
        and not cfg.disable_gradient_checkpointing
    )


# the optimizers that work on the model's own weights (why: part_unfit_<option> in config/problem_texts.py)
_PROMPT_UNFIT_OPTIMIZERS = ("use_galore", "use_apollo", "use_badam", "use_muon")


def _count(names: list[str]) -> str:
    """The key's ending: one option or several (the sentence says "is"/"it" or "are"/"them")."""
    return "one" if len(names) == 1 else "many"


def prompt_learning_problems(cfg: Config, given: set[str]) -> Iterator[Problem]:
    """ptuning / prompt options with another method, and what the two cannot do (each refused by name, with why)."""
    for method, name in PROMPT_METHOD_NAMES.items():
        own = [k for k in options_only_for(method) if k in given]
        if own and cfg.finetuning_type != method:
            yield problem(
                f"prompt_only_{_count(own)}",
                (*own, "finetuning_type"),
                names=tuple(own),
                name=name,
                method=cfg.finetuning_type,
                wanted=method,
            )
    method = cfg.finetuning_type
    if method not in PROMPT_METHOD_NAMES:
        return
    name = PROMPT_METHOD_NAMES[method]
    if cfg.stage in ("ppo", "grpo"):
        yield problem(
            "prompt_rollouts",
            ("stage", "finetuning_type"),
            stage=cfg.stage,
            method=method,
            critic=Said("part_critic") if cfg.stage == "ppo" else None,
            name=name,
            stages=("sft", "pt", "dpo", "kto", "rm") if method == "ptuning" else ("sft", "pt"),
        )
    elif method == "prompt" and cfg.stage in _POSITION_STAGES:
        yield problem(
            "prompt_positions", ("stage", "finetuning_type"), stage=cfg.stage, reads=_POSITION_STAGES[cfg.stage]
        )
    variants = [k for k in ("use_dft_loss", "use_eaft_loss", "use_asft_loss") if getattr(cfg, k)]
    if method == "prompt" and variants:
        yield problem("prompt_loss_variant", (variants[0], "finetuning_type"), name=variants[0])
    for option in ("neat_packing", "padding_free"):
        if getattr(cfg, option):
            yield problem(
                f"prompt_packed_{method}", (option, "finetuning_type"), option=option, method=method, name=name
            )
    if method == "ptuning":
        yield from _prefix_checkpointing_problems(cfg, given)
    for option in _PROMPT_UNFIT_OPTIMIZERS:
        if getattr(cfg, option):
            yield problem(
                f"prompt_optimizer_{method}",
                (option, "finetuning_type"),
                option=option,
                method=method,
                why=Said(f"part_unfit_{option}"),
                name=name,
            )


def _prefix_checkpointing_problems(cfg: Config, given: set[str]) -> Iterator[Problem]:
    """``gradient_checkpointing: true`` (or its layer count) with ptuning: refused by name, as peft refuses it."""
    if cfg.gradient_checkpointing is True:
        yield problem(
            "ptuning_checkpointing", ("gradient_checkpointing", "finetuning_type"), why=PREFIX_CHECKPOINTING_WHY
        )
    elif "gradient_checkpointing_layers" in given and cfg.gradient_checkpointing_layers is not None:
        yield problem(
            "ptuning_checkpointing_layers",
            ("gradient_checkpointing_layers", "finetuning_type"),
            why=PREFIX_CHECKPOINTING_WHY,
        )
