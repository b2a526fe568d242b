"""Quantized export (``export_quantization_bit`` 4/8): merge first, then quantize the merged folder.

The method is never substituted (:func:`quantization_method`):

- ``gptq``: GPTQ through transformers' ``GPTQConfig`` with calibration texts rendered from
  ``export_quantization_dataset`` by the template. This is what LLaMA-Factory's ``export_quantization_bit`` +
  ``export_quantization_dataset`` mean, so a calibration dataset without ``export_quantization_method`` selects it.
  Transformers runs it through the ``gptqmodel`` and ``optimum`` packages; without them tunekit stops before
  anything is written, naming them. tunekit cannot pull them in itself: every gptqmodel release on PyPI conflicts
  with its pins (7.7.0 needs torch>=2.14.1, protobuf>=7.36 and pillow>=13; 7.5-7.6 pin numpy==2.2.6; 7.0-7.6 need
  protobuf>=7.34; older ones need pypcre to build), against torch 2.13.0, protobuf 6.33.6, numpy 2.4.6.
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


def merged_export_config(cfg: Config, tmp: Path):
    """The options for the unquantized merge written first (one shard, safetensors) into ``tmp/merged``."""
    return cfg.model_copy(
        update={"export_dir": str(tmp / "merged"), "export_size": 1000.0, "export_legacy_format": False}
    )


def quantize_merged(cfg: Config, merged: Path):
    """Load the merged folder quantized: ``(model, tokenizer, template, cfg, quantization)`` for
    exporter.save_folder."""
    method, bits = quantization_method(cfg), cfg.export_quantization_bit
    check_available(cfg)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(merged)
    tcfg = cfg if cfg.template else cfg.model_copy(update={"template": "jinja"})
    template = load_template(tcfg, tokenizer)
    if method == "bnb":
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
        qconfig = _bnb_config(bits)
    else:
        qconfig = _gptq_config(cfg, bits, tokenizer, template)
    model = AutoModelForCausalLM.from_pretrained(
        merged, quantization_config=qconfig, dtype=torch.float32, device_map="auto" if method == "gptq" else None
    )
    return model, tokenizer, template, tcfg, {"method": method, "bits": bits}


def quantization_method(cfg: Config) -> str:
    """``export_quantization_method``, else ``gptq`` when a calibration dataset is given (LLaMA-Factory's meaning),
    else ``bnb``."""
    if cfg.export_quantization_method:
        return cfg.export_quantization_method
    return "gptq" if cfg.export_quantization_dataset else "bnb"


GPTQ_PACKAGES = ("gptqmodel", "optimum")


def check_available(cfg: Config) -> None:
    """Stop before anything is loaded or written when the chosen method's packages are missing."""
    method = quantization_method(cfg)
    if method == "bnb" and importlib.util.find_spec("bitsandbytes") is None:
        raise EnvironmentProblem(
            "export_quantization_bit with export_quantization_method bnb needs bitsandbytes: "
            "pip install 'tunekit[quant]'. Nothing was written."
        )
    if method == "gptq":
        missing = [name for name in GPTQ_PACKAGES if importlib.util.find_spec(name) is None]
        if missing:
            why = (
                "export_quantization_method: gptq"
                if cfg.export_quantization_method
                else f"export_quantization_bit {cfg.export_quantization_bit} with export_quantization_dataset "
                f"{cfg.export_quantization_dataset} means GPTQ (as in LLaMA-Factory), and gptq"
            )
            raise EnvironmentProblem(
                f"{why} needs the gptqmodel package (with optimum; missing here: {', '.join(missing)}), "
                f"which transformers' GPTQConfig quantizes through. tunekit cannot install it into this environment: "
                f"every gptqmodel release conflicts with its pins (torch 2.13.0, protobuf 6.33.6, numpy 2.4.6), "
                f"so use a separate environment with "
                f"`pip install gptqmodel optimum` (an NVIDIA GPU is what gptqmodel is built and tested for). "
                f"Nothing was written. For a data-free export on this machine set export_quantization_method: bnb "
                f"(bitsandbytes) and remove export_quantization_dataset."
            )
        if not cfg.export_quantization_dataset:
            raise ConfigError(
                "export_quantization_method: gptq needs calibration data: set export_quantization_dataset "
                "(a dataset name from dataset_info.json or a file path). Nothing was written."
            )


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
    """``export_quantization_nsamples`` whole conversations of ``export_quantization_dataset``, rendered by the
    template."""

    if not cfg.export_quantization_dataset:
        raise ConfigError(
            "export_quantization_method: gptq needs calibration data: set export_quantization_dataset "
            "(a dataset name from dataset_info.json or a file path)."
        )
    texts: list[str] = []
    for attr in resolve_datasets([cfg.export_quantization_dataset], cfg.dataset_dir):
        for raw in read_records(attr, cache_dir=cfg.cache_dir):
            try:
                sample = convert_record(raw, attr, "sft")
            except RecordError:
                continue
            texts.append(
                template.render(sample["messages"], sample.get("system") or None, sample.get("tools") or None)
            )
            if len(texts) >= cfg.export_quantization_nsamples:
                return texts
    return texts


def _gptq_config(cfg: Config, bits: int, tokenizer, template):
    from transformers import GPTQConfig

    texts = calibration_texts(cfg, template)
    return GPTQConfig(bits=bits, dataset=texts, tokenizer=tokenizer, model_seqlen=cfg.export_quantization_maxlen)
