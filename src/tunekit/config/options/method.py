"""Stage and fine-tuning method: what is trained and how."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from ..stages import STAGE_NAMES
from .base import OptionGroup

# Options that only make sense for one finetuning_type (used by the cross-field validator).
LORA_ONLY = (
    "lora_rank", "lora_alpha", "lora_dropout", "lora_target", "additional_target", "use_rslora",
    "use_dora", "pissa_init", "pissa_iter", "pissa_convert", "loraplus_lr_ratio", "create_new_adapter",
)
FREEZE_ONLY = ("freeze_trainable_layers", "freeze_trainable_modules", "freeze_extra_modules")


class MethodOptions(OptionGroup):
    GROUP = "method"
    TITLE = "Stage and method"

    stage: Literal[STAGE_NAMES] = Field("sft", description="Training stage: pt (pretrain), sft, rm (reward model), ppo, dpo, kto, grpo.")  # config/stages.py
    do_train: bool = Field(True, description="Run training. Not set: true, unless do_predict or do_eval is set, which then run alone (LLaMA-Factory's predict/eval-only configs).")
    do_eval: bool = Field(False, description="Run evaluation on the validation data after training.")
    do_predict: bool = Field(False, description="Generate predictions for the evaluation data and score them.")
    finetuning_type: Literal["lora", "oft", "freeze", "full"] = Field("lora", description="lora (adapters), oft (orthogonal adapters, peft OFT), freeze (train the last layers), or full.")

    # LoRA
    lora_rank: int = Field(8, ge=1, description="LoRA rank r.")
    lora_alpha: Optional[int] = Field(None, ge=1, description="LoRA scale alpha (default: 2 x lora_rank).")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA input.")
    lora_target: str = Field("all", description="Modules that get adapters: all (every linear layer but the LM head) or comma-separated names (q_proj,v_proj).")
    additional_target: Optional[str] = Field(None, description="Extra modules trained in full and saved with the adapter (e.g. embed_tokens,lm_head).")
    use_rslora: bool = Field(False, description="Rank-stabilised LoRA scaling alpha/sqrt(r).")
    use_dora: bool = Field(False, description="Weight-decomposed LoRA (DoRA).")
    pissa_init: bool = Field(False, description="Initialise LoRA from the principal singular vectors (PiSSA).")
    pissa_iter: int = Field(16, ge=-1, description="Fast-SVD iterations for PiSSA (-1 = exact SVD).")
    pissa_convert: bool = Field(False, description="Save the PiSSA adapter converted to a plain LoRA adapter.")
    loraplus_lr_ratio: Optional[float] = Field(None, gt=0, description="LoRA+: learning-rate ratio of B over A.")
    create_new_adapter: bool = Field(False, description="Start a new adapter on top of adapter_name_or_path instead of training the last one.")

    # Freeze
    freeze_trainable_layers: int = Field(2, description="Freeze: train the last N layers (negative: the first -N).")
    freeze_trainable_modules: str = Field("all", description="Freeze: modules trained inside those layers, comma-separated (all = every module).")
    freeze_extra_modules: Optional[str] = Field(None, description="Freeze: extra modules outside the layers to train (e.g. embed_tokens,norm).")
