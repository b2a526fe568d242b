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
    yield from prompt_learning_problems(cfg, given)
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


# P-Tuning v2 and prompt tuning (model/prompt_adapters.py): their options, the stages and features they work with.
PROMPT_METHOD_NAMES = {"ptuning": "P-Tuning v2", "prompt": "prompt tuning"}
# stages whose loss reads each input position's log-prob or score: prompt tuning's virtual tokens shift them
_POSITION_STAGES = {"dpo": "sequence log-probs", "kto": "sequence log-probs", "rm": "the last token's score"}
# why P-Tuning v2 trains without gradient checkpointing: ``gradient_checkpointing: true`` is refused with it (below),
# and ``auto`` decides off for it without a memory plan (``Config.use_gradient_checkpointing``, train/decisions)
PREFIX_CHECKPOINTING_WHY = (
    "its prefix reaches every layer's attention as a KV cache, which transformers' checkpointed decoder layers drop "
    "(a layer replayed in backward would write its keys into the cache again), and peft refuses prefix tuning on a "
    "checkpointed model"
)


def checkpointing_auto_off(cfg: Config) -> bool:
    """``gradient_checkpointing: auto`` with ptuning: off, decided from the config alone (no memory plan)."""
    return (
        cfg.finetuning_type == "ptuning"
        and cfg.gradient_checkpointing == "auto"
        and not cfg.disable_gradient_checkpointing
    )


_PROMPT_UNFIT_OPTIMIZERS = {
    "use_galore": "projects the gradients of the model's weight matrices",
    "use_apollo": "scales the gradients of the model's weight matrices",
    "use_badam": "trains the decoder layers block by block",
    "use_muon": "orthogonalises the updates of the decoder layers' weight matrices",
}


def prompt_learning_problems(cfg: Config, given: set[str]) -> Iterator[Problem]:
    """ptuning / prompt options with another method, and what the two cannot do (each refused by name, with why)."""
    for method, name in PROMPT_METHOD_NAMES.items():
        own = [k for k in options_only_for(method) if k in given]
        if own and cfg.finetuning_type != method:
            yield Problem(
                f"{', '.join(own)} {'is a ' + name + ' option' if len(own) == 1 else 'are ' + name + ' options'} but "
                f"finetuning_type is '{cfg.finetuning_type}': set finetuning_type: {method} or remove "
                f"{'it' if len(own) == 1 else 'them'}.",
                (*own, "finetuning_type"),
            )
    method = cfg.finetuning_type
    if method not in PROMPT_METHOD_NAMES:
        return
    name = PROMPT_METHOD_NAMES[method]
    if cfg.stage in ("ppo", "grpo"):
        yield Problem(
            f"stage {cfg.stage} with finetuning_type {method}: {cfg.stage} samples rollouts with the policy"
            f"{' and trains a critic beside it' if cfg.stage == 'ppo' else ''}, which tunekit does for weight "
            f"methods only ({name} is supported for sft{', pt' if method == 'ptuning' else ''}"
            f"{', dpo, kto and rm' if method == 'ptuning' else ' and pt'}); use finetuning_type lora for {cfg.stage}.",
            ("stage", "finetuning_type"),
        )
    elif method == "prompt" and cfg.stage in _POSITION_STAGES:
        yield Problem(
            f"stage {cfg.stage} with finetuning_type prompt: prompt tuning puts num_virtual_tokens trained positions "
            f"before every sequence, and {cfg.stage} reads {_POSITION_STAGES[cfg.stage]} at the sequence's own "
            "positions; use finetuning_type ptuning (its prefix adds no positions) or lora.",
            ("stage", "finetuning_type"),
        )
    variants = [k for k in ("use_dft_loss", "use_eaft_loss", "use_asft_loss") if getattr(cfg, k)]
    if method == "prompt" and variants:
        yield Problem(
            f"{variants[0]} with finetuning_type prompt: the loss variant weighs each input position's logits, and "
            "prompt tuning puts num_virtual_tokens positions before them; use finetuning_type ptuning or lora.",
            (variants[0], "finetuning_type"),
        )
    for option in ("neat_packing", "padding_free"):
        if getattr(cfg, option):
            yield Problem(
                f"{option} with finetuning_type {method}: {name} gives every row one prefix, and peft does not keep "
                f"the samples of a packed row apart (it {'shifts' if method == 'ptuning' else 'drops'} their "
                f"position ids); set {option}: false.",
                (option, "finetuning_type"),
            )
    if method == "ptuning":
        yield from _prefix_checkpointing_problems(cfg, given)
    for option, why in _PROMPT_UNFIT_OPTIMIZERS.items():
        if getattr(cfg, option):
            yield Problem(
                f"{option} with finetuning_type {method}: it {why}, and {name} trains none of them (only its "
                f"{'prefix' if method == 'ptuning' else 'virtual tokens'}); remove {option}.",
                (option, "finetuning_type"),
            )


def _prefix_checkpointing_problems(cfg: Config, given: set[str]) -> Iterator[Problem]:
    """``gradient_checkpointing: true`` (or its layer count) with ptuning: refused by name, as peft refuses it."""
    if cfg.gradient_checkpointing is True:
        yield Problem(
            f"gradient_checkpointing: true with finetuning_type ptuning: P-Tuning v2 trains without gradient "
            f"checkpointing ({PREFIX_CHECKPOINTING_WHY}); remove gradient_checkpointing (auto is off for ptuning) or "
            "set it false. For less activation memory lower per_device_train_batch_size or cutoff_len, or use "
            "finetuning_type lora.",
            ("gradient_checkpointing", "finetuning_type"),
        )
    elif "gradient_checkpointing_layers" in given and cfg.gradient_checkpointing_layers is not None:
        yield Problem(
            "gradient_checkpointing_layers with finetuning_type ptuning: P-Tuning v2 trains without gradient "
            f"checkpointing ({PREFIX_CHECKPOINTING_WHY}), so no layer is checkpointed; remove "
            "gradient_checkpointing_layers.",
            ("gradient_checkpointing_layers", "finetuning_type"),
        )
