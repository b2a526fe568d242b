"""Memory-efficient optimizers and the remaining methods, under LLaMA-Factory's names and defaults.

GaLore (``galore-torch``), APOLLO (``apollo-torch``), BAdam (``badam``), Adam-mini (``adam-mini``) and Muon
(``torch.optim.Muon``) replace the optimizer ``optim`` names (``tunekit.train.optimizers`` builds them; the
packages come with the ``optimizers`` extra). OFT (``finetuning_type: oft``), LLaMA Pro, pure bf16, FP8 and the
SFT loss variants DFT / EAFT / ASFT are here too. docs/optimizers.md explains each one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from ..problems import Problem, problem
from .base import OptionGroup
from .facts import option

if TYPE_CHECKING:  # annotations only: the schema combines this group
    from ..schema import Config

# needs="use_galore" & co.: the option only takes effect with that switch on (the schema refuses it otherwise).


class OptimizerOptions(OptionGroup):
    GROUP = "optimizers"
    TITLE = "Optimizers and extra methods"

    # GaLore (Zhao et al. 2024): gradients projected to a low rank, Adam moments kept in that space
    use_galore: bool = Field(
        False,
        description="GaLore: project the gradients of the target linear weights to low rank (galore-torch); full "
        "fine-tuning only.",
    )
    galore_target: str = option(
        "all",
        description="GaLore: linear modules whose weights are projected (all = every linear layer but the LM head), "
        "comma-separated.",
        needs="use_galore",
    )
    galore_rank: int = option(16, ge=1, description="GaLore: rank of the projected gradients.", needs="use_galore")
    galore_update_interval: int = option(
        200,
        ge=1,
        description="GaLore: optimizer steps between recomputing the projection (SVD of the gradient).",
        needs="use_galore",
    )
    galore_scale: float = option(
        2.0, gt=0, description="GaLore: scale of the projected-back update.", needs="use_galore"
    )
    galore_proj_type: Literal["std", "reverse_std", "right", "left", "full"] = option(
        "std", description="GaLore: which side is projected (std = the smaller dimension).", needs="use_galore"
    )
    galore_layerwise: bool = option(
        False,
        description="GaLore: step each weight as soon as its gradient is ready and free it (less memory; no gradient "
        "accumulation, no clipping).",
        needs="use_galore",
    )

    # APOLLO (Zhu et al. 2024): AdamW scaled by channel-wise factors estimated in a random low-rank space
    use_apollo: bool = Field(
        False,
        description="APOLLO: approximated gradient scaling from a low-rank auxiliary space (apollo-torch); full "
        "fine-tuning only.",
    )
    apollo_target: str = option(
        "all",
        description="APOLLO: linear modules it applies to (all = every linear layer but the LM head), "
        "comma-separated.",
        needs="use_apollo",
    )
    apollo_rank: int = option(16, ge=1, description="APOLLO: rank of the auxiliary space.", needs="use_apollo")
    apollo_update_interval: int = option(
        200, ge=1, description="APOLLO: optimizer steps between new projections.", needs="use_apollo"
    )
    apollo_scale: float = option(
        32.0, gt=0, description="APOLLO: scaling coefficient of the update.", needs="use_apollo"
    )
    apollo_proj: Literal["svd", "random"] = option(
        "random",
        description="APOLLO: projection (random = seeded Gaussian, svd = of the gradient).",
        needs="use_apollo",
    )
    apollo_proj_type: Literal["std", "right", "left"] = option(
        "std", description="APOLLO: which side is projected.", needs="use_apollo"
    )
    apollo_scale_type: Literal["channel", "tensor"] = option(
        "channel",
        description="APOLLO: one scaling factor per channel or per tensor (tensor = APOLLO-Mini with rank 1).",
        needs="use_apollo",
    )
    apollo_layerwise: bool = option(
        False,
        description="APOLLO: step each weight as soon as its gradient is ready (less memory; no gradient "
        "accumulation, no clipping).",
        needs="use_apollo",
    )
    apollo_scale_front: bool = option(
        False, description="APOLLO: apply the norm-growth limiter before the gradient scaling.", needs="use_apollo"
    )

    # BAdam (Luo et al. 2024): block coordinate descent, Adam on one block of layers at a time
    use_badam: bool = Field(
        False,
        description="BAdam: Adam on one block (a decoder layer) at a time, switching blocks periodically (badam); "
        "full fine-tuning only.",
    )
    badam_mode: Literal["layer", "ratio"] = option(
        "layer",
        description="BAdam: layer = one decoder layer per block; ratio = a share of every weight matrix "
        "(badam_update_ratio).",
        needs="use_badam",
    )
    badam_start_block: int | None = option(
        None,
        ge=0,
        description="BAdam layer mode: index of the first block (default: by badam_switch_mode).",
        needs="use_badam",
    )
    badam_switch_mode: Literal["ascending", "descending", "random", "fixed"] | None = option(
        "ascending", description="BAdam layer mode: order in which blocks are trained.", needs="use_badam"
    )
    badam_switch_interval: int | None = option(
        50, description="BAdam layer mode: optimizer steps per block (-1 = never switch).", needs="use_badam"
    )
    badam_update_ratio: float = option(
        0.05, gt=0, le=1, description="BAdam ratio mode: share of each weight matrix updated.", needs="use_badam"
    )
    badam_mask_mode: Literal["adjacent", "scatter"] = option(
        "adjacent", description="BAdam ratio mode: updated entries adjacent or scattered.", needs="use_badam"
    )
    badam_verbose: int = option(
        0,
        ge=0,
        le=2,
        description="BAdam: 0 = quiet, 1 = print the block, 2 = print its parameters.",
        needs="use_badam",
    )

    # Muon and Adam-mini
    use_muon: bool = Field(
        False,
        description="Muon (torch.optim.Muon) for the 2-D hidden weight matrices, AdamW for embeddings, LM head, norms "
        "and biases; full or freeze fine-tuning.",
    )
    use_adam_mini: bool = Field(
        False,
        description="Adam-mini (adam-mini): one second-moment value per block (head, neuron) instead of per weight; "
        "full or freeze fine-tuning.",
    )

    # OFT / QOFT (peft's OFTConfig)
    oft_rank: int = option(
        0,
        ge=0,
        description="OFT: number of orthogonal blocks per weight (0 = derived from oft_block_size; set one "
        "of the two: a set oft_rank replaces oft_block_size's default).",
        only="oft",
    )
    oft_block_size: int = option(
        32, ge=0, description="OFT: size of each orthogonal block (0 = derived from oft_rank).", only="oft"
    )
    oft_target: str = option(
        "all",
        description="OFT: linear modules that get an orthogonal adapter (all = every linear layer but the LM head), "
        "comma-separated.",
        only="oft",
    )
    module_dropout: float = option(
        0.0, ge=0, lt=1, description="OFT: multiplicative dropout of whole blocks during training.", only="oft"
    )

    # LLaMA Pro
    use_llama_pro: bool = Field(
        False,
        description="LLaMA Pro: train only the expanded blocks of a model made by `tunekit expand-blocks` "
        "(finetuning_type: freeze, freeze_trainable_layers = how many were added).",
    )

    # precision
    pure_bf16: bool = Field(
        False,
        description="Train entirely in bfloat16: weights, gradients and optimizer states in bf16, no fp32 master "
        "weights, no autocast.",
    )
    fp8: bool = Field(
        False,
        description="FP8 mixed precision through accelerate (torchao / Transformer Engine): needs a Hopper "
        "or newer GPU.",
    )
    fp8_backend: Literal["auto", "torchao", "te", "msamp"] = option(
        "auto",
        description="FP8 backend: auto or torchao (torchao's Float8Linear, rowwise scaling; the fp8 extra), te "
        "(NVIDIA Transformer Engine); msamp is refused.",
        needs="fp8",
    )
    fp8_enable_fsdp_float8_all_gather: bool = option(
        False, description="FP8: all-gather FSDP2 weights in float8 (torchao, with tensor-wise scaling).", needs="fp8"
    )

    # SFT loss variants
    use_dft_loss: bool = Field(
        False,
        description="DFT loss (Wu et al. 2025): each trained token's cross-entropy weighted by its "
        "probability (detached).",
    )
    use_eaft_loss: bool = Field(
        False,
        description="EAFT loss: each trained token's cross-entropy weighted by the model's (top-20) entropy / 3, to "
        "the power eaft_alpha (detached).",
    )
    eaft_alpha: float = option(1.0, ge=0, description="EAFT: exponent of the entropy weight.", needs="use_eaft_loss")
    use_asft_loss: bool = Field(
        False,
        description="ASFT loss: DFT loss + asft_alpha x KL(reference || model) per trained token, against the frozen "
        "starting model.",
    )
    asft_alpha: float = option(0.1, ge=0, description="ASFT: weight of the KL term.", needs="use_asft_loss")


def optimizer_problems(cfg: Config) -> Iterator[Problem]:
    """The group's rules, as LLaMA-Factory enforces them (``Config._check_combinations`` calls it)."""
    yield from _optimizer_choice_problems(cfg)
    yield from _projection_problems(cfg)
    yield from _optimizer_pairing_problems(cfg)
    yield from _badam_engine_problems(cfg)
    if cfg.use_llama_pro and cfg.finetuning_type != "freeze":
        yield problem("llama_pro_needs_freeze", ("use_llama_pro", "finetuning_type"), method=cfg.finetuning_type)
    yield from _low_precision_problems(cfg)


def _optimizer_choice_problems(cfg: Config) -> Iterator[Problem]:
    """One optimizer that replaces ``optim`` at a time, not with LoRA+ (each builds the optimizer), and the ones that
    project the full weights not with an adapter method."""
    custom = [k for k in ("use_galore", "use_apollo", "use_badam", "use_muon", "use_adam_mini") if getattr(cfg, k)]
    if len(custom) > 1:
        yield problem("optimizers_several", tuple(custom), custom=tuple(custom))
    if custom and cfg.loraplus_lr_ratio:
        yield problem("optimizer_and_loraplus", (custom[0], "loraplus_lr_ratio"), name=custom[0])
    projected = [k for k in ("use_galore", "use_apollo", "use_badam") if getattr(cfg, k)]
    if projected and cfg.finetuning_type in ("lora", "oft"):
        yield problem(
            "projected_with_adapter", (projected[0], "finetuning_type"), name=projected[0], method=cfg.finetuning_type
        )


def _projection_problems(cfg: Config) -> Iterator[Problem]:
    """GaLore and APOLLO: a projection per full weight matrix (no sharding), layerwise steps (no accumulation)."""
    for name in ("use_galore", "use_apollo"):
        if getattr(cfg, name) and (cfg.deepspeed or cfg.fsdp):
            engine = "deepspeed" if cfg.deepspeed else "fsdp"
            shown = "DeepSpeed" if cfg.deepspeed else "FSDP"
            yield problem("projection_sharded", (name, engine), name=name, engine=shown, option=engine)
    for name, layerwise in (("use_galore", "galore_layerwise"), ("use_apollo", "apollo_layerwise")):
        if getattr(cfg, name) and getattr(cfg, layerwise) and cfg.gradient_accumulation_steps != 1:
            yield problem("layerwise_accumulation", (layerwise, "gradient_accumulation_steps"), name=layerwise)


def _optimizer_pairing_problems(cfg: Config) -> Iterator[Problem]:
    """The optimizers that wrap a torch optimizer take only the ones they are built on (train/optimizers.py builds
    them: GaLoreAdamW / GaLoreAdamW8bit / GaLoreAdafactor, APOLLOAdamW; BAdam's ratio mode has sparse gradients)."""
    optim = cfg.optim.lower()
    if cfg.use_galore and not (optim.startswith(("adamw", "adafactor")) or "8bit" in optim):
        yield problem("galore_optim", ("use_galore", "optim"), optim=cfg.optim)
    if cfg.use_apollo and not optim.startswith("adamw"):
        yield problem("apollo_optim", ("use_apollo", "optim"), optim=cfg.optim)
    if cfg.use_badam and cfg.badam_mode == "ratio" and cfg.max_grad_norm:
        yield problem("badam_ratio_clipping", ("badam_mode", "max_grad_norm"))


def _badam_engine_problems(cfg: Config) -> Iterator[Problem]:
    """BAdam trains one block at a time on one device: neither FSDP nor DeepSpeed."""
    if cfg.use_badam and cfg.fsdp:
        yield problem("badam_fsdp", ("use_badam", "fsdp"))
    if cfg.use_badam and cfg.deepspeed:
        # Layer mode under ZeRO-3 ran on 2 CPU ranks but its losses left the one-device run's by ~2e-3 from the second
        # step (AdamW under ZeRO-3: <= 2e-6), cause not found: refused rather than train something that is not BAdam.
        yield problem("badam_deepspeed", ("use_badam", "deepspeed"))


def _low_precision_problems(cfg: Config) -> Iterator[Problem]:
    """pure_bf16 (bf16 weights, no autocast) and FP8 training, against the other precision and engine options."""
    if cfg.pure_bf16 and (cfg.bf16 or cfg.fp16):
        yield problem("pure_bf16_mixed", ("pure_bf16", *(k for k in ("bf16", "fp16") if getattr(cfg, k))))
    if cfg.pure_bf16 and cfg.dtype not in ("auto", "bfloat16"):
        yield problem("pure_bf16_dtype", ("pure_bf16", "dtype"), dtype=cfg.dtype)
    if cfg.pure_bf16 and str(cfg.deepspeed or "").startswith("z3"):
        yield problem("pure_bf16_zero3", ("pure_bf16", "deepspeed"))
    if cfg.fp8 and cfg.fp8_backend == "msamp":  # LLaMA-Factory's third backend; accelerate's MS-AMP path is not wired
        yield problem("fp8_msamp", ("fp8_backend",))
    if cfg.fp8 and cfg.quantization_bit is not None:
        yield problem("fp8_quantization", ("fp8", "quantization_bit"))
    if cfg.fp8 and cfg.fp8_enable_fsdp_float8_all_gather and not cfg.fsdp:
        yield problem("fp8_all_gather_fsdp", ("fp8_enable_fsdp_float8_all_gather", "fsdp"))


def sft_loss_problems(cfg: Config) -> Iterator[Problem]:
    """DFT, EAFT and ASFT are alternative losses of stage sft: one at a time, and only there."""
    losses = [k for k in ("use_dft_loss", "use_eaft_loss", "use_asft_loss") if getattr(cfg, k)]
    if len(losses) > 1:
        yield problem("sft_losses_several", tuple(losses), custom=tuple(losses))
    if losses and cfg.stage != "sft":
        yield problem("sft_loss_stage", (losses[0], "stage"), name=losses[0], stage=cfg.stage)
