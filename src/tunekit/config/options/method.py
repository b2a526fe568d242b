"""Stage and fine-tuning method: what is trained and how."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..stages import STAGE_NAMES
from .base import OptionGroup
from .facts import option

# only="lora" / "freeze": the option belongs to that finetuning_type (the schema refuses it with another; the
# board shows it in that method's section). config/options/facts.py explains the facts.


class MethodOptions(OptionGroup):
    GROUP = "method"
    TITLE = "Stage and method"

    # The stages are declared in config/stages.py.
    stage: Literal[STAGE_NAMES] = Field(
        "sft", description="Training stage: pt (pretrain), sft, rm (reward model), ppo, dpo, kto, grpo."
    )
    do_train: bool = Field(
        True,
        description="Run training. Not set: true, unless do_predict or do_eval is set, which then run alone "
        "(LLaMA-Factory's predict/eval-only configs).",
    )
    do_eval: bool = Field(False, description="Evaluate on the validation data (after training, when do_train is on).")
    do_predict: bool = Field(False, description="Generate predictions for the evaluation data and score them.")
    finetuning_type: Literal["lora", "oft", "freeze", "full", "ptuning", "prompt"] = Field(
        "lora",
        description="lora (adapters), oft (orthogonal adapters, peft OFT), freeze (train the last layers), full, "
        "ptuning (P-Tuning v2: a trained key/value prefix in every layer, peft prefix tuning) or prompt (prompt "
        "tuning: trained virtual tokens before the input, peft).",
    )

    # LoRA
    lora_rank: int = option(8, ge=1, description="LoRA rank r.", only="lora", section="lora")
    lora_alpha: int | None = option(
        None, ge=1, description="LoRA scale alpha (default: 2 x lora_rank).", only="lora", section="lora"
    )
    lora_dropout: float = option(
        0.0, ge=0, lt=1, description="Dropout on the LoRA input.", only="lora", section="lora"
    )
    lora_target: str = option(
        "all",
        min_length=1,
        description="Modules that get adapters: all (every linear layer but the LM head) or comma-separated names "
        "(q_proj,v_proj).",
        only="lora",
        section="lora",
    )
    additional_target: str | None = option(
        None,
        description="Extra modules trained in full and saved with the adapter (e.g. embed_tokens,lm_head).",
        only="lora",
        section="lora",
    )
    use_rslora: bool = option(
        False, description="Rank-stabilised LoRA scaling alpha/sqrt(r).", only="lora", section="lora"
    )
    use_dora: bool = option(False, description="Weight-decomposed LoRA (DoRA).", only="lora", section="lora")
    pissa_init: bool = option(
        False, description="Initialise LoRA from the principal singular vectors (PiSSA).", only="lora", section="lora"
    )
    pissa_iter: int = option(
        16, ge=-1, description="Fast-SVD iterations for PiSSA (-1 = exact SVD).", only="lora", section="lora"
    )
    pissa_convert: bool = option(
        False, description="Save the PiSSA adapter converted to a plain LoRA adapter.", only="lora", section="lora"
    )
    loraplus_lr_ratio: float | None = option(
        None, gt=0, description="LoRA+: learning-rate ratio of B over A.", only="lora", section="lora"
    )
    create_new_adapter: bool = option(
        False,
        description="Start a new adapter on top of adapter_name_or_path instead of training the last one.",
        only="lora",
        section="lora",
    )

    # Freeze
    freeze_trainable_layers: int = option(
        2, description="Freeze: train the last N layers (negative: the first -N).", only="freeze", section="freeze"
    )
    freeze_trainable_modules: str = option(
        "all",
        description="Freeze: modules trained inside those layers, comma-separated (all = every module).",
        only="freeze",
        section="freeze",
    )
    freeze_extra_modules: str | None = option(
        None,
        description="Freeze: extra modules outside the layers to train (e.g. embed_tokens,norm).",
        only="freeze",
        section="freeze",
    )

    # P-Tuning v2 (peft prefix tuning) and prompt tuning (model/prompt_adapters.py)
    pre_seq_len: int = option(
        128,
        ge=1,
        description="P-Tuning v2: number of trained prefix positions given to every layer's attention as keys and "
        "values (the name of ChatGLM's P-Tuning v2 scripts; peft's num_virtual_tokens).",
        only="ptuning",
    )
    prefix_projection: bool = option(
        False,
        description="P-Tuning v2: compute the prefix with a two-layer MLP from pre_seq_len trained embeddings "
        "(ChatGLM's prefix_projection); the saved adapter holds the computed prefix.",
        only="ptuning",
    )
    prefix_hidden_size: int | None = option(
        None,
        ge=1,
        description="P-Tuning v2: hidden size of the prefix MLP (peft's encoder_hidden_size; default: the key/value "
        "width of one layer).",
        only="ptuning",
        needs="prefix_projection",
    )
    num_virtual_tokens: int = option(
        20,
        ge=1,
        description="Prompt tuning: number of trained virtual tokens put before the input embeddings (initialised "
        "from randomly chosen vocabulary embeddings).",
        only="prompt",
    )
