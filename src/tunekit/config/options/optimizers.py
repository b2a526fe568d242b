"""Memory-efficient optimizers and the remaining methods, under LLaMA-Factory's names and defaults.

GaLore (``galore-torch``), APOLLO (``apollo-torch``), BAdam (``badam``), Adam-mini (``adam-mini``) and Muon
(``torch.optim.Muon``) replace the optimizer ``optim`` names (``tunekit.train.optimizers`` builds them; the
packages come with the ``optimizers`` extra). OFT (``finetuning_type: oft``), LLaMA Pro, pure bf16, FP8 and the
SFT loss variants DFT / EAFT / ASFT are here too. docs/optimizers.md explains each one.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from .base import OptionGroup
from .facts import option

# Options that only make sense with their switch on (used by the cross-field validator in config/schema.py).
SWITCHED = {
    "use_galore": ("galore_target", "galore_rank", "galore_update_interval", "galore_scale", "galore_proj_type", "galore_layerwise"),
    "use_apollo": ("apollo_target", "apollo_rank", "apollo_update_interval", "apollo_scale", "apollo_proj", "apollo_proj_type",
                   "apollo_scale_type", "apollo_layerwise", "apollo_scale_front"),
    "use_badam": ("badam_mode", "badam_start_block", "badam_switch_mode", "badam_switch_interval", "badam_update_ratio",
                  "badam_mask_mode", "badam_verbose"),
    "use_eaft_loss": ("eaft_alpha",),
    "use_asft_loss": ("asft_alpha",),
    "fp8": ("fp8_backend", "fp8_enable_fsdp_float8_all_gather"),
}


class OptimizerOptions(OptionGroup):
    GROUP = "optimizers"
    TITLE = "Optimizers and extra methods"

    # GaLore (Zhao et al. 2024): gradients projected to a low rank, Adam moments kept in that space
    use_galore: bool = Field(False, description="GaLore: project the gradients of the target linear weights to low rank (galore-torch); full fine-tuning only.")
    galore_target: str = Field("all", description="GaLore: linear modules whose weights are projected (all = every linear layer but the LM head), comma-separated.")
    galore_rank: int = Field(16, ge=1, description="GaLore: rank of the projected gradients.")
    galore_update_interval: int = Field(200, ge=1, description="GaLore: optimizer steps between recomputing the projection (SVD of the gradient).")
    galore_scale: float = Field(2.0, gt=0, description="GaLore: scale of the projected-back update.")
    galore_proj_type: Literal["std", "reverse_std", "right", "left", "full"] = Field("std", description="GaLore: which side is projected (std = the smaller dimension).")
    galore_layerwise: bool = Field(False, description="GaLore: step each weight as soon as its gradient is ready and free it (less memory; no gradient accumulation, no clipping).")

    # APOLLO (Zhu et al. 2024): AdamW scaled by channel-wise factors estimated in a random low-rank space
    use_apollo: bool = Field(False, description="APOLLO: approximated gradient scaling from a low-rank auxiliary space (apollo-torch); full fine-tuning only.")
    apollo_target: str = Field("all", description="APOLLO: linear modules it applies to (all = every linear layer but the LM head), comma-separated.")
    apollo_rank: int = Field(16, ge=1, description="APOLLO: rank of the auxiliary space.")
    apollo_update_interval: int = Field(200, ge=1, description="APOLLO: optimizer steps between new projections.")
    apollo_scale: float = Field(32.0, gt=0, description="APOLLO: scaling coefficient of the update.")
    apollo_proj: Literal["svd", "random"] = Field("random", description="APOLLO: projection (random = seeded Gaussian, svd = of the gradient).")
    apollo_proj_type: Literal["std", "right", "left"] = Field("std", description="APOLLO: which side is projected.")
    apollo_scale_type: Literal["channel", "tensor"] = Field("channel", description="APOLLO: one scaling factor per channel or per tensor (tensor = APOLLO-Mini with rank 1).")
    apollo_layerwise: bool = Field(False, description="APOLLO: step each weight as soon as its gradient is ready (less memory; no gradient accumulation, no clipping).")
    apollo_scale_front: bool = Field(False, description="APOLLO: apply the norm-growth limiter before the gradient scaling.")

    # BAdam (Luo et al. 2024): block coordinate descent, Adam on one block of layers at a time
    use_badam: bool = Field(False, description="BAdam: Adam on one block (a decoder layer) at a time, switching blocks periodically (badam); full fine-tuning only.")
    badam_mode: Literal["layer", "ratio"] = Field("layer", description="BAdam: layer = one decoder layer per block; ratio = a share of every weight matrix (badam_update_ratio).")
    badam_start_block: Optional[int] = Field(None, ge=0, description="BAdam layer mode: index of the first block (default: by badam_switch_mode).")
    badam_switch_mode: Optional[Literal["ascending", "descending", "random", "fixed"]] = Field("ascending", description="BAdam layer mode: order in which blocks are trained.")
    badam_switch_interval: Optional[int] = Field(50, description="BAdam layer mode: optimizer steps per block (-1 = never switch).")
    badam_update_ratio: float = Field(0.05, gt=0, le=1, description="BAdam ratio mode: share of each weight matrix updated.")
    badam_mask_mode: Literal["adjacent", "scatter"] = Field("adjacent", description="BAdam ratio mode: updated entries adjacent or scattered.")
    badam_verbose: int = Field(0, ge=0, le=2, description="BAdam: 0 = quiet, 1 = print the block, 2 = print its parameters.")

    # Muon and Adam-mini
    use_muon: bool = Field(False, description="Muon (torch.optim.Muon) for the 2-D hidden weight matrices, AdamW for embeddings, LM head, norms and biases; full or freeze fine-tuning.")
    use_adam_mini: bool = Field(False, description="Adam-mini (adam-mini): one second-moment value per block (head, neuron) instead of per weight; full or freeze fine-tuning.")

    # OFT / QOFT (peft's OFTConfig)
    oft_rank: int = option(0, ge=0, description="OFT: number of orthogonal blocks per weight (0 = derived from oft_block_size; set one of the two).", only="oft")
    oft_block_size: int = option(32, ge=0, description="OFT: size of each orthogonal block (0 = derived from oft_rank).", only="oft")
    oft_target: str = option("all", description="OFT: linear modules that get an orthogonal adapter (all = every linear layer but the LM head), comma-separated.", only="oft")
    module_dropout: float = option(0.0, ge=0, lt=1, description="OFT: multiplicative dropout of whole blocks during training.", only="oft")

    # LLaMA Pro
    use_llama_pro: bool = Field(False, description="LLaMA Pro: train only the expanded blocks of a model made by `tunekit expand-blocks` (finetuning_type: freeze, freeze_trainable_layers = how many were added).")

    # precision
    pure_bf16: bool = Field(False, description="Train entirely in bfloat16: weights, gradients and optimizer states in bf16, no fp32 master weights, no autocast.")
    fp8: bool = Field(False, description="FP8 mixed precision through accelerate (torchao / Transformer Engine): needs a Hopper or newer GPU.")
    fp8_backend: Literal["auto", "torchao", "te", "msamp"] = Field(
        "auto", description="FP8 backend: auto or torchao (torchao's Float8Linear, rowwise scaling; the fp8 extra), te (NVIDIA Transformer Engine); msamp is refused.")
    fp8_enable_fsdp_float8_all_gather: bool = Field(False, description="FP8: all-gather FSDP2 weights in float8 (torchao, with tensor-wise scaling).")

    # SFT loss variants
    use_dft_loss: bool = Field(False, description="DFT loss (Wu et al. 2025): each trained token's cross-entropy weighted by its probability (detached).")
    use_eaft_loss: bool = Field(False, description="EAFT loss: each trained token's cross-entropy weighted by the model's (top-20) entropy / 3, to the power eaft_alpha (detached).")
    eaft_alpha: float = Field(1.0, ge=0, description="EAFT: exponent of the entropy weight.")
    use_asft_loss: bool = Field(False, description="ASFT loss: DFT loss + asft_alpha x KL(reference || model) per trained token, against the frozen starting model.")
    asft_alpha: float = Field(0.1, ge=0, description="ASFT: weight of the KL term.")
