"""Quantized loading: the package (and machine) each ``quantization_method`` needs, the ``quantization_config`` that
``from_pretrained`` quantizes the weights with, and the checks of a base saved already quantized (GPTQ/AWQ/AQLM).
"""

from __future__ import annotations

import importlib.util

from ..config.schema import Config
from ..errors import ConfigError, EnvironmentProblem
from .multimodal import quantization_skip_modules


def check_quantization_packages(cfg: Config) -> None:
    """The package (and machine) ``quantization_bit`` / ``quantization_method`` need: refused before any process
    starts (``train/preflight.py``) and again before the weights load. bitsandbytes runs on CPU too."""
    if cfg.quantization_bit is None:
        return
    method = cfg.quantization_method
    if method == "bnb" and importlib.util.find_spec("bitsandbytes") is None:
        raise EnvironmentProblem(
            "quantization_bit needs bitsandbytes: pip install bitsandbytes (or `pip install tunekit[quant]`)."
        )
    if method == "hqq" and importlib.util.find_spec("hqq") is None:
        raise EnvironmentProblem("quantization_method: hqq needs the hqq package (pip install hqq).")
    if method == "eetq":
        if importlib.util.find_spec("eetq") is not None:
            import torch  # only with eetq installed: the parent's preflight imports no torch otherwise

            if torch.cuda.is_available():
                return
        raise EnvironmentProblem(
            "quantization_method: eetq needs the eetq package and an NVIDIA GPU; use bnb on this machine."
        )


def quantization_config(cfg: Config, dtype):
    if cfg.quantization_bit is None:
        return None
    check_quantization_packages(cfg)
    method = cfg.quantization_method
    if method == "bnb":
        from transformers import BitsAndBytesConfig

        skip = quantization_skip_modules(cfg)  # a VLM's vision tower and projector stay unquantized
        if cfg.quantization_bit == 8:
            return BitsAndBytesConfig(load_in_8bit=True, llm_int8_skip_modules=skip)
        return BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_compute_dtype=dtype,
            bnb_4bit_quant_type=cfg.quantization_type,
            bnb_4bit_use_double_quant=cfg.double_quantization,
            bnb_4bit_quant_storage=dtype,
            llm_int8_skip_modules=skip,
        )
    if method == "hqq":
        from transformers import HqqConfig

        return HqqConfig(nbits=cfg.quantization_bit, group_size=64)
    from transformers import EetqConfig  # eetq

    return EetqConfig("int8")


# Pre-quantized bases (config.json's quantization_config.quant_method; LLaMA-Factory's train_qlora examples): the
# packages transformers loads them through, and what those packages need. Checked before any weight is read.
AQLM_CPU_TRAINING = (
    "on CPU, aqlm 1.1.7 loads the model but peft 0.21's AQLM LoRA layer adds the adapter in place to "
    "aqlm's output ('Output 0 of _QuantizedMatmul is a view and is being modified inplace'), which "
    "autograd forbids, so QLoRA on an AQLM base does not train without CUDA"
)
PREQUANTIZED = {
    "gptq": (
        ("gptqmodel", "optimum"),
        "pip install gptqmodel optimum",
        "gptqmodel has CPU kernels, but no gptqmodel release installs next to tunekit's pins (torch 2.13.0, "
        "protobuf 6.33.6, numpy 2.4.6): use an environment built for it, usually on an NVIDIA GPU",
    ),
    "awq": (
        ("gptqmodel",),
        "pip install gptqmodel",
        "transformers loads AWQ through gptqmodel, and no gptqmodel release installs next to tunekit's pins "
        "(torch 2.13.0, protobuf 6.33.6, numpy 2.4.6): use an environment built for it, usually on an NVIDIA GPU",
    ),
    "aqlm": (
        ("aqlm",),
        "pip install 'aqlm[gpu]' on an NVIDIA GPU ('aqlm[cpu]' for inference on CPU)",
        "training needs a GPU: " + AQLM_CPU_TRAINING,
    ),
}


def _settings(qc) -> dict:
    return qc if isinstance(qc, dict) else getattr(qc, "to_dict", lambda: {})()


def check_prequantized(config, cfg: Config, path: str, is_trainable: bool = True) -> None:
    """A base saved already quantized (GPTQ/AWQ/AQLM/...) trains only adapters, through its own package: refused
    before loading, naming the package, instead of transformers' ImportError traceback."""
    qc = getattr(config, "quantization_config", None)
    if qc is None:
        return
    method = str(_settings(qc).get("quant_method", "")).lower()
    if cfg.quantization_bit is not None:
        raise ConfigError(
            f"{path} is already quantized ({method or 'quantization_config in config.json'}): remove "
            f"quantization_bit (it would quantize the model a second time)."
        )
    if is_trainable and cfg.finetuning_type not in ("lora", "oft"):
        raise ConfigError(
            f"{path} is a {method or 'pre-quantized'} model: its quantized weights cannot be trained "
            f"directly; set finetuning_type: lora (QLoRA on the quantized base) or use the unquantized model."
        )
    if method == "aqlm" and is_trainable:
        import torch

        if not torch.cuda.is_available():
            raise EnvironmentProblem(
                f"{path} is a pre-quantized AQLM model: {AQLM_CPU_TRAINING}. Train it on an NVIDIA "
                f"GPU (pip install 'aqlm[gpu]'), or train on the unquantized model with "
                f"quantization_bit: 4 (bitsandbytes QLoRA, runs on CPU)."
            )
    if method == COMPRESSED_TENSORS:
        check_compressed_tensors(_settings(qc), path, is_trainable or bool(cfg.adapter_name_or_path))
    if method in PREQUANTIZED:
        packages, install, where = PREQUANTIZED[method]
        missing = [p for p in packages if importlib.util.find_spec(p) is None]
        if missing:
            raise EnvironmentProblem(
                f"{path} is a pre-quantized {method.upper()} model (quantization_config in config.json); "
                f"loading it needs {' and '.join(packages)} (missing: {', '.join(missing)}): "
                f"{install}; {where}. Or train on the unquantized model with "
                f"quantization_bit: 4 (bitsandbytes QLoRA, runs on CPU)."
            )


# compressed-tensors (tunekit's own GPTQ export, llm-compressor's W4A16 / W8A16 models): transformers 5.24 loads it
# through the compressed-tensors package, which has no kernel that computes with the packed weights on this stack
# (its CompressedLinear is gone in 0.19): the model is decompressed either way, at load (``dequantize: true``,
# transformers' documented setting for fine-tuning) or at its first forward, and peft can wrap only the first (a
# Linear left compressed has weight_packed, no weight). tunekit always asks for the first: every quantized Linear
# holds exactly code x scale of the saved model, in the load dtype; the adapter trains against the quantized model.
COMPRESSED_TENSORS = "compressed-tensors"
COMPRESSED_TENSORS_INSTALL = "pip install 'tunekit[quant]' (or pip install 'compressed-tensors==0.19.0')"


def check_compressed_tensors(settings: dict, path: str, dense: bool) -> None:
    """The package; and, where the model must be dense (``dense``: training, or an adapter to apply), a scheme that
    quantizes the weights only: decompressing drops activation / KV-cache quantization, so the adapter would train
    on (or apply to) a model other than the one saved. Chat without an adapter keeps transformers' own loading."""
    if importlib.util.find_spec("compressed_tensors") is None:
        raise EnvironmentProblem(
            f"{path} is a pre-quantized compressed-tensors model (quantization_config in config.json; tunekit's "
            f"GPTQ export writes this format); transformers loads it through the compressed-tensors package, "
            f"missing here: {COMPRESSED_TENSORS_INSTALL}."
        )
    quantized = _beyond_weights(settings)
    if dense and quantized:
        raise ConfigError(
            f"{path} is a compressed-tensors model that quantizes {' and '.join(quantized)} too: tunekit trains "
            f"such a base only as transformers decompresses it (weights back to the load dtype, activations "
            f"unquantized), so the adapter would train on another model than the one saved. Use a weight-only "
            f"model (W4A16 / W8A16, as tunekit's GPTQ export writes) or the unquantized model."
        )


def _beyond_weights(settings: dict) -> list[str]:
    """What a compressed-tensors scheme quantizes besides the weights."""
    groups = (settings.get("config_groups") or {}).values()
    kinds = {k for g in groups if isinstance(g, dict) for k in ("input_activations", "output_activations") if g.get(k)}
    return sorted(kinds | ({"kv_cache_scheme"} if settings.get("kv_cache_scheme") else set()))


def dequantize_on_load(config):
    """``config`` with a weight-only compressed-tensors base set to decompress while loading (see COMPRESSED_TENSORS
    above: the same weights as transformers' default, which decompresses at the first forward, but wrappable by
    peft); any other config unchanged. The loaded model is a plain dense model: no quantization_config."""
    qc = getattr(config, "quantization_config", None)
    if qc is None or str(_settings(qc).get("quant_method", "")).lower() != COMPRESSED_TENSORS:
        return config
    if _beyond_weights(_settings(qc)):  # only for chat without an adapter (check_compressed_tensors)
        return config
    if isinstance(qc, dict):
        config.quantization_config = {**qc, "dequantize": True}
    else:
        qc.dequantize = True
    return config
