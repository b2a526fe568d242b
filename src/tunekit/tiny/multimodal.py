"""The pieces every tiny vision-language / audio-language builder shares: sizes, folder, random weights, tokenizer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .config import DEFAULT_MAX_POSITIONS
from .tokenizer import (
    DEFAULT_VOCAB_SIZE,
    TOKENIZERS,
    TokenizerFamily,
    build_tokenizer,
    check_tokenizer_roundtrip,
    set_tokenizer_class,
)

#: the special tokens of the Qwen VL tokenizers (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): Qwen's, then the vision ones
QWEN_VL_SPECIAL = TOKENIZERS["qwen"].special + (
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)


@dataclass(frozen=True)
class TinySizes:
    """The sizes every tiny multimodal builder takes (``tunekit tiny-model``'s --hidden-size ... options)."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    vocab_size: int | None = None
    max_position_embeddings: int = DEFAULT_MAX_POSITIONS


#: the sizes a family's builder uses when it is given none
DEFAULT_SIZES = TinySizes()


def new_folder(out_dir, fam: TokenizerFamily, chat_template: str, sizes: TinySizes, tokenizer=None):
    """The output folder, the family's tokenizer (trained BPE) and the model's vocabulary: the tokenizer's size rounded
    up to 64 (as real checkpoints pad it), or ``sizes.vocab_size`` when larger."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if tokenizer is None:
        tokenizer = build_tokenizer(
            fam, sizes.vocab_size or DEFAULT_VOCAB_SIZE, chat_template, sizes.max_position_embeddings
        )
    n_tok = len(tokenizer)
    return out, tokenizer, (max(sizes.vocab_size, n_tok) if sizes.vocab_size else -(-n_tok // 64) * 64)


def random_model(auto_class, config, seed: int, fam: TokenizerFamily, ids: dict[str, int], **generation):
    """``auto_class.from_config(config)`` with fp32 weights drawn from ``seed`` (the global RNG left as it was), its
    ``architectures`` and a greedy generation config that stops at the family's end tokens."""
    import torch
    from transformers import GenerationConfig

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = auto_class.from_config(config, dtype=torch.float32)
    model.config.architectures = [type(model).__name__]
    model.generation_config = GenerationConfig(
        eos_token_id=[ids[t] for t in fam.generation_eos], pad_token_id=ids[fam.pad], do_sample=False, **generation
    )
    return model


def save_tokenizer(out: Path, tokenizer, fam: TokenizerFamily) -> None:
    """Save the tokenizer under the family's class name and check that it reloads to the same ids."""
    tokenizer.save_pretrained(out)
    set_tokenizer_class(out, fam.tokenizer_class)
    check_tokenizer_roundtrip(out, tokenizer)
