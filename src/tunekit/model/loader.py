"""Load the tokenizer and the model exactly as a real run does: ``from_pretrained`` on a folder or hub id.

Every failure a user can cause (missing folder, offline hub id, missing GPU package) becomes a
:class:`~tunekit.errors.TunekitError` that says what to do.
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError, EnvironmentProblem, ModelError


def model_path(cfg, attr: str = "model_name_or_path") -> str:
    path = getattr(cfg, attr)
    if not path:
        raise ConfigError(f"{attr} is not set: give a local model folder or a hub id (e.g. Qwen/Qwen2.5-0.5B-Instruct).")
    looks_local = path.startswith(("/", "./", "../", "~")) or os.path.exists(path) or path.count("/") != 1
    if looks_local:
        p = Path(path).expanduser()
        if not p.exists():
            raise ModelError(f"Model folder {path} does not exist (model_name_or_path). Check the path, or use a hub id like Qwen/Qwen2.5-0.5B.")
        if p.is_dir() and not (p / "config.json").is_file():
            raise ModelError(f"{path} has no config.json: it is not a Hugging Face model folder.")
        return str(p)
    return path


def _hub_hint(path: str, exc: Exception) -> str:
    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true")
    why = "HF_HUB_OFFLINE is set and it is not in the local cache" if offline else str(exc).splitlines()[0][:300]
    return (f"Could not load '{path}' ({why}). Download it while online (huggingface-cli download {path}) or point "
            f"model_name_or_path at a local folder.")


def load_tokenizer(cfg, padding_side: str = "right"):
    from transformers import AutoTokenizer

    path = model_path(cfg)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            path, trust_remote_code=cfg.trust_remote_code, use_fast=cfg.use_fast_tokenizer, revision=cfg.model_revision,
            cache_dir=cfg.cache_dir, split_special_tokens=cfg.split_special_tokens, padding_side=padding_side,
        )
    except (OSError, ValueError) as exc:
        if "trust_remote_code" in str(exc):
            raise ModelError(f"{path} ships its own tokenizer code; set trust_remote_code: true if you trust it.") from None
        raise ModelError(_hub_hint(path, exc)) from None
    if cfg.add_special_tokens:
        new = [t.strip() for t in cfg.add_special_tokens.split(",") if t.strip()]
        tokenizer.add_special_tokens({"additional_special_tokens": new}, replace_additional_special_tokens=False)
    return tokenizer


def load_model_config(cfg):
    from transformers import AutoConfig

    path = model_path(cfg)
    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=cfg.trust_remote_code, revision=cfg.model_revision, cache_dir=cfg.cache_dir)
    except (OSError, ValueError) as exc:
        if "trust_remote_code" in str(exc):
            raise ModelError(f"{path} needs its own modelling code; set trust_remote_code: true if you trust it.") from None
        raise ModelError(_hub_hint(path, exc)) from None


def compute_dtype(cfg):
    import torch

    names = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}
    if cfg.dtype != "auto":
        return names[cfg.dtype]
    if cfg.bf16:
        return torch.bfloat16
    if cfg.fp16:
        return torch.float16
    return torch.float32


def attention_implementation(cfg) -> str:
    if cfg.flash_attn in ("auto", "sdpa"):
        return "sdpa"
    if cfg.flash_attn in ("disabled", "eager"):
        return "eager"
    # fa2
    if importlib.util.find_spec("flash_attn") is None:
        raise EnvironmentProblem("flash_attn: fa2 needs the flash-attn package (pip install flash-attn --no-build-isolation) "
                                 "and an NVIDIA GPU; or use flash_attn: sdpa.")
    import torch

    if not torch.cuda.is_available():
        raise EnvironmentProblem("flash_attn: fa2 needs an NVIDIA GPU and none is visible; use flash_attn: sdpa on this machine.")
    return "flash_attention_2"


def apply_rope_scaling(config, cfg) -> None:
    if not cfg.rope_scaling:
        return
    current = getattr(config, "max_position_embeddings", None)
    if not current:
        raise ModelError(f"rope_scaling: this model's config has no max_position_embeddings to scale from.")
    target = cfg.rope_scaling_target_len or cfg.cutoff_len
    if target <= current:
        print(f"rope_scaling: target length {target} fits the model's {current} positions; no scaling applied.")
        return
    factor = float(math.ceil(target / current))
    params = dict(getattr(config, "rope_parameters", None) or {})
    params.update({"rope_type": cfg.rope_scaling, "factor": factor})
    if cfg.rope_scaling == "yarn":
        params["original_max_position_embeddings"] = current
    if cfg.rope_scaling == "llama3":
        params.setdefault("original_max_position_embeddings", current)
        params.setdefault("low_freq_factor", 1.0)
        params.setdefault("high_freq_factor", 4.0)
    config.rope_parameters = params
    config.max_position_embeddings = int(current * factor)


def quantization_config(cfg, dtype):
    if cfg.quantization_bit is None:
        return None
    method = cfg.quantization_method
    if method == "bnb":
        if importlib.util.find_spec("bitsandbytes") is None:
            raise EnvironmentProblem("quantization_bit needs bitsandbytes: pip install bitsandbytes (or `pip install tunekit[quant]`).")
        from transformers import BitsAndBytesConfig

        if cfg.quantization_bit == 8:
            return BitsAndBytesConfig(load_in_8bit=True)
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=dtype, bnb_4bit_quant_type=cfg.quantization_type,
                                  bnb_4bit_use_double_quant=cfg.double_quantization, bnb_4bit_quant_storage=dtype)
    if method == "hqq":
        if importlib.util.find_spec("hqq") is None:
            raise EnvironmentProblem("quantization_method: hqq needs the hqq package (pip install hqq).")
        from transformers import HqqConfig

        return HqqConfig(nbits=cfg.quantization_bit, group_size=64)
    # eetq
    import torch

    if importlib.util.find_spec("eetq") is None or not torch.cuda.is_available():
        raise EnvironmentProblem("quantization_method: eetq needs the eetq package and an NVIDIA GPU; use bnb on this machine.")
    from transformers import EetqConfig

    return EetqConfig("int8")


def check_accelerators(cfg) -> None:
    """GPU-only kernels fail here, before any weight is loaded, with what to do instead."""
    import torch

    if cfg.enable_liger_kernel:
        if importlib.util.find_spec("liger_kernel") is None:
            raise EnvironmentProblem("enable_liger_kernel needs the liger-kernel package (pip install liger-kernel) and a GPU.")
        if not torch.cuda.is_available():
            raise EnvironmentProblem("enable_liger_kernel needs a GPU (Liger's kernels are Triton GPU kernels); none is visible. Remove the option on CPU.")
    if cfg.use_unsloth:
        if importlib.util.find_spec("unsloth") is None or not torch.cuda.is_available():
            raise EnvironmentProblem("use_unsloth needs the unsloth package and an NVIDIA GPU; remove it on this machine.")
        raise EnvironmentProblem("use_unsloth is not wired into tunekit yet; remove it (enable_liger_kernel gives fused kernels on GPUs).")


def load_model(cfg, tokenizer, is_trainable: bool = True) -> Any:
    """Load weights with the configured dtype/attention/RoPE/quantization and apply the fine-tuning method."""
    from transformers import AutoModelForCausalLM

    from .adapters import apply_finetuning

    check_accelerators(cfg)
    path = model_path(cfg)
    config = load_model_config(cfg)
    apply_rope_scaling(config, cfg)
    dtype = compute_dtype(cfg)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, config=config, dtype=dtype, attn_implementation=attention_implementation(cfg),
            quantization_config=quantization_config(cfg, dtype), trust_remote_code=cfg.trust_remote_code,
            revision=cfg.model_revision, cache_dir=cfg.cache_dir, low_cpu_mem_usage=cfg.low_cpu_mem_usage,
        )
    except OSError as exc:
        raise ModelError(_hub_hint(path, exc)) from None
    embeddings = model.get_input_embeddings().num_embeddings  # not weight.shape: 0 under ZeRO-3 (partitioned)
    if cfg.resize_vocab or cfg.add_special_tokens or len(tokenizer) > embeddings:
        if len(tokenizer) > embeddings or cfg.resize_vocab:
            model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64 if len(tokenizer) > embeddings else None)
    if is_trainable:
        model.config.use_cache = False
        if cfg.use_gradient_checkpointing:
            if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
                model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.eval()
    model = apply_finetuning(model, cfg, is_trainable=is_trainable)
    if cfg.print_param_status and is_trainable:
        for name, p in model.named_parameters():
            print(f"{name:<80} {str(tuple(p.shape)):<20} {str(p.dtype):<16} trainable={p.requires_grad}")
    return model
