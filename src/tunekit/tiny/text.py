"""Tiny random-weight models of a real text architecture family, built locally in a few seconds.

Tests, examples and benchmarks cannot download weights, so they use these: a real transformers
architecture class (Qwen2ForCausalLM, LlamaForCausalLM, ...) with the family's structural flags but
small sizes, random weights drawn from a fixed seed, and the family's byte-level BPE tokenizer
(:mod:`tunekit.tiny.tokenizer`: special tokens, bos/eos/pad and chat template). Same arguments + same library
versions -> byte-identical files. :func:`build_tiny_model` reloads the folder and checks the tokenizer before
returning.

This module imports torch/transformers lazily: importing it is cheap.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunekit.errors import ModelError

from .config import DEFAULT_MAX_POSITIONS, make_config, shrink_config
from .moe import MOE_FAMILIES, moe_summary
from .names import family_of_name
from .tokenizer import (
    DEFAULT_VOCAB_SIZE,
    TOKENIZERS,
    TokenizerFamily,
    build_tokenizer,
    check_tokenizer_roundtrip,
    family_chat_template,
    set_tokenizer_class,
)


@dataclass(frozen=True)
class Family:
    """An architecture family: the transformers model_type, its structural defaults and tokenizer."""

    model_type: str
    tokenizer: str
    config: dict[str, Any] = field(default_factory=dict)


# Structural flags of a typical small member of each family (sizes are overwritten).
FAMILIES: dict[str, Family] = {
    "qwen2": Family(
        "qwen2",
        "qwen",
        {
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "use_sliding_window": False,
            "rope_theta": 1000000.0,
        },
    ),
    "qwen3": Family(
        "qwen3",
        "qwen3",
        {
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "attention_bias": False,
            "rope_theta": 1000000.0,
        },
    ),
    "llama": Family(
        "llama",
        "llama3",
        {
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "attention_bias": False,
            "mlp_bias": False,
            "rope_theta": 500000.0,
        },
    ),
    "mistral": Family(
        "mistral",
        "mistral",
        {
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "sliding_window": None,
            "rope_theta": 1000000.0,
        },
    ),
    "gemma": Family(
        "gemma",
        "gemma",
        {
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
            "hidden_activation": "gelu_pytorch_tanh",
            "rope_theta": 10000.0,
        },
    ),
    "gemma2": Family(
        "gemma2",
        "gemma",
        {
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
            "hidden_activation": "gelu_pytorch_tanh",
            "rope_theta": 10000.0,
            "sliding_window": 128,
            "final_logit_softcapping": 30.0,
            "attn_logit_softcapping": 50.0,
        },
    ),
    "gemma3_text": Family(
        "gemma3_text",
        "gemma",
        {
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
            "hidden_activation": "gelu_pytorch_tanh",
            "sliding_window": 128,
        },
    ),
    # mixture of experts (a name's "a3b" word, mixtral): tiny/moe.py
    **{key: Family(*spec) for key, spec in MOE_FAMILIES.items()},
    # GLM-4 in transformers' native classes: GLM-4-9B-0414 (Glm4ForCausalLM: sandwich norms around attention and
    # MLP) and glm-4-9b-chat-hf (GlmForCausalLM); both a fused gate_up_proj, q/k/v biases, rotary on half the head
    "glm4": Family(
        "glm4",
        "glm4",
        {
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "attention_bias": True,
            "partial_rotary_factor": 0.5,
            "rope_theta": 10000.0,
        },
    ),
    "glm": Family(
        "glm",
        "glm4",
        {
            "tie_word_embeddings": False,
            "rms_norm_eps": 1.5625e-7,
            "hidden_act": "silu",
            "attention_bias": True,
            "partial_rotary_factor": 0.5,
            "rope_theta": 10000.0,
        },
    ),
}

# model_type (from a config.json) -> tokenizer family, for model types not in FAMILIES.
_TOKENIZER_OF_TYPE: list[tuple[str, str]] = [
    (r"qwen3", "qwen3"),
    (r"qwen", "qwen"),
    (r"gemma", "gemma"),
    (r"mistral|mixtral|ministral", "mistral"),
    (r"llama", "llama3"),
    (r"^glm", "glm4"),
    (r"^deepseek_v2", "deepseek"),
    (r"^deepseek_v3", "deepseek3"),
    (r"^gpt_oss", "gpt_oss"),
]


@dataclass
class Resolved:
    """What ``--like`` resolved to: a base config dict (with model_type) and a tokenizer family."""

    config: dict[str, Any]
    tokenizer: TokenizerFamily
    source: str


def resolve_like(like: str | os.PathLike | None) -> Resolved:
    """Resolve a family name, a model name ('qwen2.5-7b') or a config.json / model folder path."""
    like = "qwen2" if like is None else like
    path = Path(like)
    if path.is_dir() or path.suffix == ".json" or os.sep in str(like) and path.exists():
        return _resolve_config_path(path)
    fam = FAMILIES[family_of_name(like, FAMILIES)]  # read strictly: a variant tunekit cannot build is refused
    return Resolved({"model_type": fam.model_type, **fam.config}, TOKENIZERS[fam.tokenizer], str(like))


def _resolve_config_path(path: Path) -> Resolved:
    cfg_file = path / "config.json" if path.is_dir() else path
    if not cfg_file.is_file():
        raise ModelError(f"tiny-model: {cfg_file} not found; --like needs a config.json or a folder holding one.")
    try:
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"tiny-model: cannot read {cfg_file}: {exc}") from exc
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise ModelError(f"tiny-model: {cfg_file} has no 'model_type'; is it a transformers config.json?")
    if isinstance(cfg.get("text_config"), dict) and "model_type" in cfg["text_config"]:
        cfg = dict(cfg["text_config"])  # multimodal wrapper: build its text decoder
    model_type = str(cfg["model_type"])
    if cfg.get("auto_map"):
        raise ModelError(
            f"tiny-model: {cfg_file} needs remote code (auto_map); only architectures built into transformers "
            "can be shrunk."
        )
    tok = next((TOKENIZERS[t] for pat, t in _TOKENIZER_OF_TYPE if re.search(pat, model_type)), TOKENIZERS["qwen"])
    return Resolved(cfg, tok, str(cfg_file))


def build_tiny_model(
    out_dir: str | os.PathLike,
    like: str | os.PathLike | None = "qwen2",
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    intermediate_size: int | None = None,
    num_heads: int = 4,
    num_kv_heads: int | None = 2,
    vocab_size: int | None = None,
    max_position_embeddings: int = DEFAULT_MAX_POSITIONS,
) -> Path:
    """Write a tiny random model + tokenizer of ``like``'s family into ``out_dir``; returns the folder.

    ``vocab_size`` is the BPE target and the model's embedding rows (padded up to it when the corpus
    gives fewer tokens); by default the embeddings are the tokenizer's length rounded up to 64.
    """
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    resolved = resolve_like(like)
    fam = resolved.tokenizer
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = build_tokenizer(
        fam, vocab_size or DEFAULT_VOCAB_SIZE, family_chat_template(fam), max_position_embeddings
    )
    n_tok = len(tokenizer)
    model_vocab = max(vocab_size, n_tok) if vocab_size else -(-n_tok // 64) * 64
    tokenizer.save_pretrained(out)
    set_tokenizer_class(out, fam.tokenizer_class)

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (*fam.special, *fam.extra)}
    cfg = shrink_config(
        resolved.config,
        hidden_size=hidden_size,
        num_layers=num_layers,
        intermediate_size=intermediate_size,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        vocab_size=model_vocab,
        max_position_embeddings=max_position_embeddings,
    )
    cfg.update(
        bos_token_id=ids.get(fam.bos) if fam.bos else None,
        eos_token_id=ids[fam.eos],
        pad_token_id=ids.get(fam.pad) if fam.pad else None,
    )
    config = make_config(cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.config.architectures = [type(model).__name__]
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=[ids[t] for t in fam.generation_eos],
        pad_token_id=config.pad_token_id,
        do_sample=False,
    )
    model.save_pretrained(out)
    check_tokenizer_roundtrip(out, tokenizer)
    return out


def prepare_out_dir(out_dir: str | os.PathLike, overwrite: bool) -> None:
    """``tunekit tiny-model``'s output folder: missing or empty, or (``overwrite``) a model folder whose contents are
    removed first, so no file of another model stays next to the new one. Anything else is refused, nothing touched."""
    import shutil

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ModelError(f"tiny-model: {out} is a file, not a folder: choose a folder to write the model into.")
    entries = sorted(out.iterdir()) if out.is_dir() else []
    if not entries:
        return
    if not overwrite:
        raise ModelError(
            f"tiny-model: {out} exists and is not empty ({len(entries)} entries, e.g. {entries[0].name}): "
            f"choose a new or empty folder, or pass --overwrite to replace the model in it."
        )
    if not (out / "config.json").is_file():
        raise ModelError(
            f"tiny-model: --overwrite replaces a model folder (one with config.json), and {out} has none: "
            f"choose a new or empty folder; nothing was removed."
        )
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def describe(folder: str | os.PathLike) -> str:
    """A few lines about a built folder (architecture, sizes, special tokens), for the CLI."""
    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    tcfg = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    weights = folder / "model.safetensors"
    lines = [
        f"wrote {folder}",
        f"  architecture  {', '.join(cfg.get('architectures') or [])} (model_type {cfg.get('model_type')})",
        f"  sizes         hidden {cfg.get('hidden_size')}, layers {cfg.get('num_hidden_layers')}, "
        f"heads {cfg.get('num_attention_heads')}/{cfg.get('num_key_value_heads')}, vocab {cfg.get('vocab_size')}",
        f"  tokenizer     {tcfg.get('tokenizer_class')}: bos {tcfg.get('bos_token')}, eos {tcfg.get('eos_token')}, "
        f"pad {tcfg.get('pad_token')}",
    ]
    if moe := moe_summary(cfg):  # experts per layer, top-k, expert widths
        lines.append(moe)
    if weights.is_file():
        lines.append(f"  weights       {weights.stat().st_size / 2**20:.2f} MiB")
    return "\n".join(lines)
