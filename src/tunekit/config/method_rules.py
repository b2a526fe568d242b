"""Options given without the fine-tuning method or the switch they belong to, and the methods' own rules.

The ``only=`` / ``needs=`` facts of the option fields (``config/options/facts.py``) say which options belong to LoRA,
OFT, freeze or a switch such as ``use_galore``; these rules refuse such an option set without its method or switch, so
a config never carries a setting that silently does nothing. ``Config._check_combinations`` calls them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from .options import FREEZE_ONLY, LORA_ONLY, OFT_ONLY, SWITCHED
from .problems import Problem

if TYPE_CHECKING:  # annotations only: the schema imports this module to run its rules
    from .schema import Config


def method_problems(cfg: Config, given: set[str]) -> Iterator[Problem]:
    """Options of one finetuning_type set with another (their ``only=`` fact), and the LoRA variants' rules."""
    if cfg.finetuning_type != "lora":
        lora_given = [k for k in LORA_ONLY if k in given]
        if lora_given:
            yield Problem(
                f"{', '.join(lora_given)} {'is a LoRA option' if len(lora_given) == 1 else 'are LoRA options'} but "
                f"finetuning_type is '{cfg.finetuning_type}': remove {'it' if len(lora_given) == 1 else 'them'} or "
                "set finetuning_type: lora.",
                (*lora_given, "finetuning_type"),
            )
    if cfg.finetuning_type != "freeze":
        freeze_given = [k for k in FREEZE_ONLY if k in given]
        if freeze_given:
            yield Problem(
                f"{', '.join(freeze_given)} "
                f"{'is a freeze option' if len(freeze_given) == 1 else 'are freeze options'} but finetuning_type is "
                f"'{cfg.finetuning_type}': remove {'it' if len(freeze_given) == 1 else 'them'} or set "
                "finetuning_type: freeze.",
                (*freeze_given, "finetuning_type"),
            )
    if cfg.quantization_bit is not None and cfg.finetuning_type not in ("lora", "oft"):
        yield Problem(
            f"quantization_bit {cfg.quantization_bit} trains a quantized base, which only works with LoRA (QLoRA) or "
            "OFT (QOFT): set finetuning_type: lora or oft, or remove quantization_bit.",
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
            f"{cfg.additional_target} would be lost from the saved adapter; remove additional_target or "
            "pissa_convert.",
            ("pissa_convert", "additional_target"),
        )


def switch_problems(cfg: Config, given: set[str]) -> Iterator[Problem]:
    """Options that take effect only with their switch on (``needs="use_galore"`` & co.), set with it off."""
    for switch, dependents in SWITCHED.items():
        orphans = [k for k in dependents if k in given]
        if orphans and not getattr(cfg, switch):
            yield Problem(
                f"{', '.join(orphans)} only {'takes' if len(orphans) == 1 else 'take'} effect with {switch}: true: "
                f"set {switch}: true or remove {'it' if len(orphans) == 1 else 'them'}.",
                (*orphans, switch),
            )


def oft_problems(cfg: Config, given: set[str]) -> Iterator[Problem]:
    """OFT's options set with another method, and OFT's two sizes (peft derives one from the other)."""
    if cfg.finetuning_type != "oft":
        oft_given = [k for k in OFT_ONLY if k in given]
        if oft_given:
            yield Problem(
                f"{', '.join(oft_given)} {'is an OFT option' if len(oft_given) == 1 else 'are OFT options'} but "
                f"finetuning_type is '{cfg.finetuning_type}': set finetuning_type: oft or remove "
                f"{'it' if len(oft_given) == 1 else 'them'}.",
                (*oft_given, "finetuning_type"),
            )
    elif cfg.oft_rank == 0 and cfg.oft_block_size == 0:
        yield Problem(
            "oft_rank and oft_block_size are both 0: set one of them (e.g. oft_block_size: 32), and the other to 0.",
            ("oft_rank", "oft_block_size"),
        )
    elif cfg.oft_rank and cfg.oft_block_size and {"oft_rank", "oft_block_size"} <= given:
        yield Problem(
            f"oft_rank {cfg.oft_rank} and oft_block_size {cfg.oft_block_size} are both set: peft derives one from the "
            "other; set the other to 0.",
            ("oft_rank", "oft_block_size"),
        )
