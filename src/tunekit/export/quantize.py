"""Quantized export (``export_quantization_bit`` 4/8): merge first, then quantize the merged folder.

- ``bnb`` (default): bitsandbytes NF4 (4-bit, double quantization) or LLM.int8 (8-bit). Data-free and it
  runs on CPU; the folder reloads with plain ``from_pretrained`` (bitsandbytes installed). The calibration
  options are not used by this method.
- ``gptq``: GPTQ through transformers' ``GPTQConfig`` with calibration texts rendered from
  ``export_quantization_dataset`` by the template. It needs the ``gptqmodel`` package and an NVIDIA GPU
  (GPTQ's layer-wise solver runs on CUDA); without them tunekit stops with that message.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..errors import ConfigError, EnvironmentProblem


def export_quantized(cfg, out: Path, tmp: Path) -> Path:
    from .exporter import save_folder, write_merged

    method, bits = cfg.export_quantization_method, cfg.export_quantization_bit
    _check_available(method)
    merged = write_merged(cfg.model_copy(update={"export_dir": str(tmp / "merged"), "export_size": 1000.0,
                                                  "export_legacy_format": False}), tmp / "merged")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..data.pipeline import load_template

    tokenizer = AutoTokenizer.from_pretrained(merged)
    tcfg = cfg if cfg.template else cfg.model_copy(update={"template": "jinja"})
    template = load_template(tcfg, tokenizer)
    if method == "bnb":
        if cfg.export_quantization_dataset:
            print("note: bitsandbytes quantization is data-free; export_quantization_dataset is not used "
                  "(export_quantization_method: gptq uses it).")
        qconfig = _bnb_config(bits)
    else:
        qconfig = _gptq_config(cfg, bits, tokenizer, template)
    model = AutoModelForCausalLM.from_pretrained(merged, quantization_config=qconfig, dtype=torch.float32,
                                                 device_map="auto" if method == "gptq" else None)
    save_folder(model, tokenizer, template, tcfg, out, quantization={"method": method, "bits": bits})
    return out


def _check_available(method: str) -> None:
    import torch

    if method == "bnb" and importlib.util.find_spec("bitsandbytes") is None:
        raise EnvironmentProblem("export_quantization_bit with method bnb needs bitsandbytes: pip install 'tunekit[quant]'.")
    if method == "gptq":
        if importlib.util.find_spec("gptqmodel") is None or not torch.cuda.is_available():
            raise EnvironmentProblem("export_quantization_method: gptq needs the gptqmodel package (pip install gptqmodel) and an "
                                     "NVIDIA GPU: GPTQ's solver runs on CUDA. On this machine use export_quantization_method: bnb "
                                     "(bitsandbytes, data-free, runs on CPU).")


def _bnb_config(bits: int):
    import torch
    from transformers import BitsAndBytesConfig

    if bits == 8:
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch.float32)


def calibration_texts(cfg, template) -> list[str]:
    """``export_quantization_nsamples`` whole conversations of ``export_quantization_dataset``, rendered by the template."""
    from ..data.dataset_info import resolve_datasets
    from ..data.formats import RecordError, convert_record
    from ..data.readers import read_records

    if not cfg.export_quantization_dataset:
        raise ConfigError("export_quantization_method: gptq needs calibration data: set export_quantization_dataset "
                          "(a dataset name from dataset_info.json or a file path).")
    texts: list[str] = []
    for attr in resolve_datasets([cfg.export_quantization_dataset], cfg.dataset_dir):
        for raw in read_records(attr, cache_dir=cfg.cache_dir):
            try:
                sample = convert_record(raw, attr, "sft")
            except RecordError:
                continue
            texts.append(template.render(sample["messages"], sample.get("system") or None, sample.get("tools") or None))
            if len(texts) >= cfg.export_quantization_nsamples:
                return texts
    return texts


def _gptq_config(cfg, bits: int, tokenizer, template):
    from transformers import GPTQConfig

    texts = calibration_texts(cfg, template)
    return GPTQConfig(bits=bits, dataset=texts, tokenizer=tokenizer, model_seqlen=cfg.export_quantization_maxlen)
