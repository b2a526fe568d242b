"""``tunekit export CONFIG.yaml [key=value ...] [--no-verify]``."""

from __future__ import annotations

import sys

from tunekit.config import load_config
from tunekit.config.options import ExportOptions, ModelOptions
from tunekit.export import export_model

from .args import split_config_path
from .options_help import format_options_help

HELP = """usage: tunekit export [CONFIG.yaml] [key=value ...] [--no-verify]

Merge adapter_name_or_path (one or several, comma-separated) into model_name_or_path — or re-shard a full/
freeze checkpoint, or consolidate a DeepSpeed ZeRO checkpoint folder — and write a standard Hugging Face
folder to export_dir: safetensors shards of at most export_size GB + model.safetensors.index.json, config,
generation config (eos/pad from the template's stop words), tokenizer with the template as chat_template.
export_quantization_bit 4/8 quantizes: with export_quantization_dataset (LLaMA-Factory's meaning) or
export_quantization_method=gptq by GPTQ (llm-compressor in an environment tunekit creates once; the folder is
compressed-tensors, loaded with the compressed-tensors package), else (or with export_quantization_method=bnb) by
bitsandbytes NF4 / LLM.int8. The folder is verified at the end
(`tunekit verify`) unless --no-verify or export_verify=false. export_format=gguf writes one GGUF file instead
(llama.cpp's converter; export_gguf_type f32/f16/bf16/q8_0/q4_k_m) with an Ollama Modelfile beside it.
"""


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(HELP + format_options_help([ModelOptions, ExportOptions]))
        return 0
    verify = None
    if "--no-verify" in argv:
        argv = [a for a in argv if a != "--no-verify"]
        verify = False
    path, rest = split_config_path(argv)
    cfg = load_config(path, rest)
    export_model(cfg, verify=verify)
    return 0
