"""Quantized export (``export_quantization_bit`` 4/8): merge first, then quantize the merged folder.

The method is never substituted (:func:`quantization_method`):

- ``gptq``: GPTQ with calibration texts rendered from ``export_quantization_dataset`` by the template. This is what
  LLaMA-Factory's ``export_quantization_bit`` + ``export_quantization_dataset`` mean, so a calibration dataset
  without ``export_quantization_method`` selects it. It runs llm-compressor in an isolated environment created on
  demand (``gptq_env``, ``gptq_export``: no gptqmodel or llm-compressor release installs beside tunekit's pins) and
  writes the compressed-tensors format, which transformers loads through the ``compressed-tensors`` package: tunekit
  needs that one in its own environment, to check the folder it writes (``gptq_check``).
- ``bnb``: bitsandbytes NF4 (4-bit, double quantization) or LLM.int8 (8-bit). Data-free and it runs on CPU;
  the folder reloads with plain ``from_pretrained`` (bitsandbytes installed). Chosen explicitly, or when no
  calibration dataset is given; ``bnb`` together with a calibration dataset is refused by the config schema
  (the dataset would be ignored).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..config.schema import Config
from ..data.dataset_info import resolve_datasets
from ..data.formats import RecordError, convert_record
from ..data.pipeline import load_template
from ..data.readers import read_records
from ..errors import ConfigError, EnvironmentProblem
from .gptq_env import gptq_python


def merged_export_config(cfg: Config, tmp: Path):
    """The options for the unquantized merge written first (one shard, safetensors) into ``tmp/merged``."""
    return cfg.model_copy(
        update={"export_dir": str(tmp / "merged"), "export_size": 1000.0, "export_legacy_format": False}
    )


def quantize_merged(cfg: Config, merged: Path):
    """Load the merged folder quantized with bitsandbytes: ``(model, tokenizer, template, cfg, quantization)`` for
    exporter.save_folder. (GPTQ runs in its own environment: ``gptq_export.export_gptq``.)"""
    bits = cfg.export_quantization_bit
    check_available(cfg)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(merged)
    tcfg = cfg if cfg.template else cfg.model_copy(update={"template": "jinja"})
    template = load_template(tcfg, tokenizer)
    print(
        f"quantizing to {bits} bits with bitsandbytes ({'NF4, double quantization' if bits == 4 else 'LLM.int8'}; "
        f"data-free)"
        + (
            ""
            if cfg.export_quantization_method
            else ": export_quantization_method is not set and "
            "there is no export_quantization_dataset (GPTQ's calibration data)"
        )
    )
    model = AutoModelForCausalLM.from_pretrained(merged, quantization_config=_bnb_config(bits), dtype=torch.float32)
    return model, tokenizer, template, tcfg, {"method": "bnb", "bits": bits}


def quantization_method(cfg: Config) -> str:
    """``export_quantization_method``, else ``gptq`` when a calibration dataset is given (LLaMA-Factory's meaning),
    else ``bnb``."""
    if cfg.export_quantization_method:
        return cfg.export_quantization_method
    return "gptq" if cfg.export_quantization_dataset else "bnb"


# What GPTQ export needs in tunekit's own environment (llm-compressor itself lives in gptq_env's): transformers
# loads the compressed-tensors format through this package, and the export is checked by loading it.
GPTQ_PACKAGES = ("compressed_tensors",)
COMPRESSED_TENSORS_PIN = "compressed-tensors==0.19.0"


def check_available(cfg: Config) -> None:
    """Stop before anything is loaded or written when the chosen method's packages or data are missing."""
    method = quantization_method(cfg)
    if method == "bnb" and importlib.util.find_spec("bitsandbytes") is None:
        raise EnvironmentProblem(
            "export_quantization_bit with export_quantization_method bnb needs bitsandbytes: "
            "pip install 'tunekit[quant]'. Nothing was written."
        )
    if method != "gptq":
        return
    if not cfg.export_quantization_dataset:
        raise ConfigError(
            "export_quantization_method: gptq needs calibration data: set export_quantization_dataset "
            "(a dataset name from dataset_info.json or a file path). Nothing was written."
        )
    if any(importlib.util.find_spec(name) is None for name in GPTQ_PACKAGES):
        why = (
            "export_quantization_method: gptq"
            if cfg.export_quantization_method
            else f"export_quantization_bit {cfg.export_quantization_bit} with export_quantization_dataset "
            f"{cfg.export_quantization_dataset} means GPTQ (as in LLaMA-Factory), which"
        )
        raise EnvironmentProblem(
            f"{why} writes the compressed-tensors format, and transformers loads it (tunekit checks the export by "
            f"loading it) through the compressed-tensors package, missing here: pip install 'tunekit[quant]' "
            f"(or pip install '{COMPRESSED_TENSORS_PIN}'). Nothing was written."
        )
    gptq_python()  # the isolated environment, created here the first time: offline, the export stops before merging


def _bnb_config(bits: int):
    import torch
    from transformers import BitsAndBytesConfig

    if bits == 8:
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.float32,
    )


def calibration_texts(cfg: Config, template) -> list[str]:
    """The first ``export_quantization_nsamples`` records of ``export_quantization_dataset`` as text: a conversation
    (any format tunekit trains on) rendered by the template, a plain-text record (``{"text": ...}``, LLaMA-Factory's
    ``c4_demo.jsonl``: what LLaMA-Factory calibrates on) as its text."""

    if not cfg.export_quantization_dataset:
        raise ConfigError(
            "export_quantization_method: gptq needs calibration data: set export_quantization_dataset "
            "(a dataset name from dataset_info.json or a file path)."
        )
    texts: list[str] = []
    for attr in resolve_datasets([cfg.export_quantization_dataset], cfg.dataset_dir):
        for raw in read_records(attr, cache_dir=cfg.cache_dir):
            text = _record_text(raw, attr, template)
            if text:
                texts.append(text)
            if len(texts) >= cfg.export_quantization_nsamples:
                return texts
    return texts


def _record_text(raw, attr, template) -> str | None:
    try:
        sample = convert_record(raw, attr, "sft")
    except RecordError:
        try:
            return convert_record(raw, attr, "pt")["text"]
        except RecordError:
            return None
    return template.render(sample["messages"], sample.get("system") or None, sample.get("tools") or None)
