"""Tiny random-weight vision-language and audio-language models, built locally in a few seconds: the one entry.

Like :mod:`tunekit.tiny.text` for text families: the real transformers classes with tiny sizes, random weights from a
fixed seed, the family's byte-level BPE tokenizer (:mod:`tunekit.tiny.tokenizer`) with its special tokens, the
family's official chat template and a saved processor, so that the tokenizer and the processor reload from the
folder. Nothing is downloaded. :func:`build_tiny_vlm` picks the family's builder (:data:`BUILDERS`, one module per
family: ``qwen2_vl``, ``qwen3_vl``, ``audio``, ``llava_gemma3``, ``llava_next``, ``idefics3``);
:func:`describe_vlm` describes any built folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from . import audio, idefics3, llava_gemma3, llava_next, names, qwen2_vl, qwen3_vl
from .config import DEFAULT_MAX_POSITIONS
from .multimodal import TinySizes
from .text import FAMILIES

#: --like name -> model_type (one table, shared with the text builder's name check: names.py)
VLM_FAMILIES = names.VLM_FAMILIES
#: model_type -> the builder of its family, called as ``builder(out_dir, like, seed, sizes)``
BUILDERS = {
    "qwen2_vl": qwen2_vl.build_tiny_qwen2_vl,
    "qwen2_5_vl": qwen2_vl.build_tiny_qwen2_vl,
    "qwen3_vl": qwen3_vl.build_tiny_qwen3_vl,
    "qwen2_audio": audio.build_tiny_qwen2_audio,
    "llava": llava_gemma3.build_tiny_llava_or_gemma3,
    "llava_next": llava_gemma3.build_tiny_llava_or_gemma3,
    "gemma3": llava_gemma3.build_tiny_llava_or_gemma3,
    "llava_next_mistral": llava_next.build_tiny_llava_next_variant,
    "llava_next_llama3": llava_next.build_tiny_llava_next_variant,
    "idefics3": idefics3.build_tiny_idefics3,
    "smolvlm": idefics3.build_tiny_idefics3,
}
#: model_types that :func:`llava_gemma3.describe_vlm` describes (the Qwen ones: :func:`qwen2_vl.describe_vlm`)
_DESCRIBED_AS_LLAVA = (*llava_gemma3.FAMILIES.values(), "idefics3", "smolvlm")


def is_vlm_family(like) -> bool:
    return isinstance(like, str) and like.strip().lower() in VLM_FAMILIES


def build_tiny_vlm(
    out_dir: str | os.PathLike,
    like: str = "qwen2-vl",
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    vocab_size: int | None = None,
    max_position_embeddings: int = DEFAULT_MAX_POSITIONS,
) -> Path:
    """Write a tiny random vision-language (or audio-language) model of family ``like`` (weights, tokenizer, chat
    template, processor) into ``out_dir``, by its family's builder (BUILDERS)."""
    key = like.strip().lower()
    if key not in VLM_FAMILIES:
        raise names.refuse(like, "not a vision-language family tunekit builds", FAMILIES)
    sizes = TinySizes(hidden_size, num_layers, num_heads, num_kv_heads, vocab_size, max_position_embeddings)
    return BUILDERS[VLM_FAMILIES[key]](out_dir, key, seed, sizes)


def describe_vlm(folder: str | os.PathLike) -> str:
    """A few lines about a built VLM folder, for the CLI."""
    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if cfg.get("model_type") in _DESCRIBED_AS_LLAVA:
        return llava_gemma3.describe_vlm(folder)
    return qwen2_vl.describe_vlm(folder)
