"""Model options: where the weights come from and how they are loaded."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from ..problems import Problem, problem
from .base import OptionGroup
from .facts import option

if TYPE_CHECKING:  # annotations only: the schema combines this group
    from ..schema import Config


class ModelOptions(OptionGroup):
    GROUP = "model"
    TITLE = "Model"

    model_name_or_path: str | None = Field(
        None, description="Local model folder or hub id (e.g. Qwen/Qwen2.5-7B-Instruct)."
    )
    adapter_name_or_path: str | None = Field(
        None,
        description="LoRA adapter folder(s), comma-separated; merged in order, the last one keeps training if "
        "finetuning_type is lora.",
    )
    cache_dir: str | None = Field(
        None, description="Where hub downloads are cached (default: the Hugging Face cache)."
    )
    model_revision: str = Field("main", description="Hub revision (branch, tag or commit) of the model.")
    trust_remote_code: bool = Field(
        False, description="Run modelling code shipped with the model folder; off unless you trust it."
    )
    use_fast_tokenizer: bool = Field(True, description="Use the fast (Rust) tokenizer.")
    split_special_tokens: bool = Field(False, description="Tokenize special-token strings in the data as plain text.")
    resize_vocab: bool = Field(False, description="Resize the embeddings to the tokenizer's vocabulary size.")
    add_tokens: str | None = Field(
        None,
        description="Comma-separated (non-special) tokens to add to the tokenizer; their embedding rows start as "
        "init_special_tokens noise_init says.",
    )
    add_special_tokens: str | None = Field(
        None,
        description="Comma-separated special tokens to add to the tokenizer; the embeddings are resized when the "
        "tokenizer outgrows them, and each new token's row is initialised as init_special_tokens says.",
    )
    new_special_tokens_config: str | None = Field(
        None,
        description="YAML file of `token: description` lines (LLaMA-Factory's): its tokens are added as special "
        "tokens (instead of add_special_tokens) and init_special_tokens desc_init starts each one's embedding from "
        "its description.",
    )
    init_special_tokens: Literal["noise_init", "desc_init", "desc_init_w_noise"] = Field(
        "noise_init",
        description="How the embedding rows of the added special tokens start: noise_init = the mean of the "
        "vocabulary's rows plus Gaussian noise of std 1/sqrt(hidden size); desc_init = the mean of the rows of the "
        "description's tokens (needs new_special_tokens_config); desc_init_w_noise = that plus the same noise. An "
        "untied output embedding (lm_head) gets the same from its own rows.",
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32", "float64"] = Field(
        "auto",
        description="Weight dtype when loading: auto = bfloat16 with bf16: true, float16 with fp16: true, else "
        "float32 (with no precision option set the device decides bf16/fp16, printed at the start and noted in "
        "tunekit_config.yaml); float32 keeps fp32 on every device; float64 is for numerical reference runs (parity "
        "checks against a float32 run; CPU, slow).",
    )
    flash_attn: Literal["auto", "disabled", "eager", "sdpa", "fa2"] = option(
        "auto",
        description="Attention kernel: auto = transformers' default (sdpa where the model has it, else eager: "
        "gpt-oss); fa2 = FlashAttention-2 (needs the flash-attn package and a GPU); disabled/eager = plain attention.",
        section="acceleration",
    )
    rope_scaling: Literal["linear", "dynamic", "yarn", "llama3"] | None = option(
        None,
        description="RoPE scaling to extend the context; the factor is chosen from rope_scaling_target_len (or "
        "cutoff_len).",
        section="acceleration",
    )
    rope_scaling_target_len: int | None = option(
        None,
        ge=1,
        description="Context length to reach with rope_scaling (default: cutoff_len).",
        section="acceleration",
    )
    gradient_checkpointing: Literal["auto", True, False] = option(
        "auto",
        description="Recompute activations in the backward pass to save memory (about 25 % slower); auto = on unless "
        "the memory plan, made once the data is tokenized (at its longest training row), shows the run fits without "
        "it with a wide margin (the decision is printed).",
        section="acceleration",
    )
    gradient_checkpointing_layers: int | None = option(
        None,
        ge=1,
        description="With gradient checkpointing: recompute only this many decoder layers (the lowest ones); the "
        "others keep their activations and are not recomputed. Empty = all layers; auto sets it to the "
        "fewest that fit.",
        section="acceleration",
    )
    use_reentrant_gc: bool = option(
        False,
        description="Gradient checkpointing through PyTorch's reentrant implementation (LLaMA-Factory's default: "
        "true) instead of the non-reentrant one (transformers' default: false); the same gradients.",
        section="acceleration",
    )
    elementwise_recompute: bool = option(
        True,
        description="Save recipes instead of the gated MLP's activation output and product and the RMSNorm outputs, "
        "and recompute them in the backward pass (the same bits): about 45 % less activation memory per decoder layer "
        "that is not checkpointed, for a few element-wise ops. Off under torch_compile and enable_liger_kernel. On by "
        "default for a run on the CPU, where it was measured; off by default on a GPU, where it was never measured: "
        "set it true there to opt in (train/decisions).",
        section="acceleration",
    )
    disable_gradient_checkpointing: bool = option(
        False, description="LLaMA-Factory's spelling of gradient_checkpointing: false.", section="acceleration"
    )
    enable_liger_kernel: bool = option(
        False,
        description="Use Liger's fused kernels (RMSNorm, SwiGLU, fused linear cross-entropy); needs "
        "liger-kernel and a GPU.",
        section="acceleration",
    )
    use_unsloth: bool = option(
        False, description="Use Unsloth's patched model (needs unsloth and a GPU).", section="acceleration"
    )
    use_v1_kernels: bool = option(
        False,
        description="LLaMA-Factory's switch for its v1 fused kernels (Ascend NPU RMSNorm, RoPE, SwiGLU, MoE): false "
        "is accepted so its configs load; true is refused: use enable_liger_kernel (fused kernels on GPUs) and "
        "flash_attn: fa2.",
        section="acceleration",
    )
    quantization_bit: Literal[4, 8] | None = option(
        None,
        description="Load the base model quantized to 4 or 8 bits (QLoRA; needs finetuning_type lora).",
        section="quantization",
    )
    quantization_method: Literal["bnb", "hqq", "eetq"] = option(
        "bnb", description="Quantization library for quantization_bit.", section="quantization"
    )
    quantization_type: Literal["nf4", "fp4"] = option(
        "nf4", description="4-bit data type for bitsandbytes.", section="quantization"
    )
    double_quantization: bool = option(
        True, description="Quantize the 4-bit scales too (bitsandbytes).", section="quantization"
    )
    low_cpu_mem_usage: bool = Field(True, description="Load weights without a random-init copy in memory.")
    allow_new_weights: bool = Field(
        False,
        description="Load a model folder whose weights do not all match its config.json's architecture: weights the "
        "folder lacks start random, weights it has no place for are dropped (for a model extended on purpose). Off: "
        "such a folder is refused, naming the keys.",
    )
    moe_aux_loss_coef: float | None = Field(
        None,
        ge=0,
        description="Mixture-of-experts models: weight of the router's load-balancing (auxiliary) loss, added to the "
        "loss of each forward as transformers computes it (sets the model's router_aux_loss_coef and "
        "output_router_logits) and logged as moe/aux_loss; empty = no router loss. Stages sft and pt; refused on a "
        "dense model.",
    )
    print_param_status: bool = Field(
        False, description="Print every parameter's name, shape, dtype and trainable flag after set-up."
    )


def checkpointing_problems(cfg: Config, given: set[str]) -> Iterator[Problem]:
    """Hugging Face's and LLaMA-Factory's switch for gradient checkpointing, both given, must agree."""
    if (
        "gradient_checkpointing" in given
        and "disable_gradient_checkpointing" in given
        and cfg.gradient_checkpointing is cfg.disable_gradient_checkpointing
    ):
        yield problem("checkpointing_disagree", ("gradient_checkpointing", "disable_gradient_checkpointing"))


def kernel_problems(cfg: Config) -> Iterator[Problem]:
    """``use_v1_kernels: true``: LLaMA-Factory's v1 kernel plugins (its ``model/loader.py`` applies the "auto" kernels,
    which exist for Ascend NPUs only), which tunekit does not have; false (LLaMA-Factory's default) is accepted."""
    if cfg.use_v1_kernels:
        yield problem("v1_kernels", ("use_v1_kernels",))


def moe_problems(cfg: Config) -> Iterator[Problem]:
    """``moe_aux_loss_coef`` joins the loss where tunekit computes the language-model loss (sft, pt); the other stages'
    losses would drop it silently."""
    if cfg.moe_aux_loss_coef is not None and cfg.stage not in ("sft", "pt"):
        yield problem("moe_aux_stage", ("moe_aux_loss_coef", "stage"), stage=cfg.stage)


def special_token_problems(cfg: Config) -> Iterator[Problem]:
    """LLaMA-Factory warns and carries on where these disagree (the YAML's tokens win over add_special_tokens;
    desc_init without descriptions falls back to noise_init); tunekit refuses rather than substitute silently."""
    if cfg.new_special_tokens_config and cfg.add_special_tokens:
        yield problem("special_tokens_twice", ("add_special_tokens", "new_special_tokens_config"))
    if cfg.init_special_tokens != "noise_init" and not cfg.new_special_tokens_config:
        yield problem(
            "desc_init_needs_config",
            ("init_special_tokens", "new_special_tokens_config"),
            value=cfg.init_special_tokens,
        )
