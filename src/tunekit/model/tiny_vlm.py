"""Tiny random-weight vision-language models (Qwen2-VL, Qwen2.5-VL), built locally in a few seconds.

Like :mod:`tunekit.model.tiny` for text families: the real transformers classes
(``Qwen2VLForConditionalGeneration``, ``Qwen2_5_VLForConditionalGeneration``) with tiny sizes, random
weights from a fixed seed, the byte-level BPE tokenizer of ``tiny.py`` trained on the shipped corpus and
carrying the family's special tokens (``<|vision_start|>``, ``<|image_pad|>``, ``<|video_pad|>`` ...), the
family's official chat template, and a saved processor (``preprocessor_config.json``: the image
processor, with a small ``max_pixels`` so a test image gives a few dozen image tokens) so that
the tokenizer and the image processor reload from the folder. Nothing is downloaded.

The image processor saved is transformers' PIL/numpy ``Qwen2VLImageProcessorPil`` (torchvision is not
needed; on this machine its wheels break imports). ``Qwen2VLProcessor`` itself cannot be built without
torchvision in transformers 5.24 (its ``video_processor`` attribute must be a torchvision-backed
``BaseVideoProcessor``), so tunekit uses the tokenizer and the image processor directly and expands
``<|image_pad|>`` by the processor's own rule (``tunekit.data.mm_plugins.qwen2_vl``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from tunekit.errors import ModelError

from . import tiny_names
from .tiny import (
    DEFAULT_MAX_POSITIONS,
    DEFAULT_VOCAB_SIZE,
    FAMILIES,
    TOKENIZERS,
    TokenizerFamily,
    _set_tokenizer_class,
    build_tokenizer,
    check_tokenizer_roundtrip,
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
QWEN2_VL_TOKENS = replace(TOKENIZERS["qwen"], name="qwen2_vl", template="qwen2_vl", special=QWEN_VL_SPECIAL)
TOKENIZERS.setdefault(QWEN2_VL_TOKENS.name, QWEN2_VL_TOKENS)  # tiny.py trains a family's BPE by its name

#: Qwen/Qwen2-VL-7B-Instruct's chat_template (Qwen2.5-VL-7B-Instruct ships the same one), verbatim.
QWEN2_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in content "
    "or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture "
    "{{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'video' "
    "or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video "
    "{{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}"
    "{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "<|im_start|>assistant\n{% endif %}"
)

#: --like name -> model_type (one table, shared with the text builder's name check: tiny_names)
VLM_FAMILIES = tiny_names.VLM_FAMILIES
#: model_type -> "module:builder" of a family built by its own module, called as ``builder(out_dir, like, seed, sizes)``
BUILDERS = {
    "qwen3_vl": "tiny_vlm_qwen3:build_tiny_qwen3_vl",
    "qwen2_audio": "tiny_audio:build_tiny_qwen2_audio",
    "llava": "tiny_vlm_families:build_tiny_llava_or_gemma3",
    "llava_next": "tiny_vlm_families:build_tiny_llava_or_gemma3",
    "gemma3": "tiny_vlm_families:build_tiny_llava_or_gemma3",
    "llava_next_mistral": "tiny_vlm_llava_next:build_tiny_llava_next_variant",
    "llava_next_llama3": "tiny_vlm_llava_next:build_tiny_llava_next_variant",
    "idefics3": "tiny_vlm_idefics3:build_tiny_idefics3",
    "smolvlm": "tiny_vlm_idefics3:build_tiny_idefics3",
}
#: the tiny image processor's pixel budget: a 224x224 image gives (224/28)^2 = 64 image tokens at most
TINY_MAX_PIXELS = 224 * 224
TINY_MIN_PIXELS = 28 * 28


@dataclass(frozen=True)
class TinySizes:
    """The sizes every tiny multimodal builder takes (``tunekit tiny-model``'s --hidden-size ... options)."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    vocab_size: int | None = None
    max_position_embeddings: int = DEFAULT_MAX_POSITIONS


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
    _set_tokenizer_class(out, fam.tokenizer_class)
    check_tokenizer_roundtrip(out, tokenizer)


def is_vlm_family(like) -> bool:
    return isinstance(like, str) and like.strip().lower() in VLM_FAMILIES


def _config(
    model_type: str,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    vocab_size: int,
    ids: dict[str, int],
    max_positions: int,
):
    from transformers import AutoConfig

    head_dim = hidden_size // num_heads
    if head_dim % 8:
        raise ModelError(
            f"tiny-model: {model_type} needs hidden_size / num_heads divisible by 8 (M-RoPE splits the "
            f"rotary half in 3 sections); got head_dim {head_dim}."
        )
    half = head_dim // 2
    section = [half - 2 * (3 * half // 8), 3 * half // 8, 3 * half // 8]  # real models: [16, 24, 24] of 64
    text = dict(
        hidden_size=hidden_size,
        intermediate_size=4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        vocab_size=vocab_size,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-6,
        hidden_act="silu",
        max_window_layers=num_layers,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": section},
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        initializer_range=0.02,
        tie_word_embeddings=False,
    )
    common_vision = dict(
        depth=2,
        num_heads=2,
        in_channels=3,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
        initializer_range=0.02,
    )
    if model_type == "qwen2_vl":
        vision = dict(common_vision, embed_dim=32, hidden_size=hidden_size, mlp_ratio=2, hidden_act="quick_gelu")
    else:
        vision = dict(
            common_vision,
            hidden_size=32,
            intermediate_size=64,
            out_hidden_size=hidden_size,
            hidden_act="silu",
            window_size=56,
            fullatt_block_indexes=[1],
            tokens_per_second=2,
        )
    return AutoConfig.for_model(
        model_type,
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )


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
    template, processor) into ``out_dir``: Qwen2-VL / Qwen2.5-VL here, the other families by their module (BUILDERS)."""
    import importlib

    key = like.strip().lower()
    if key not in VLM_FAMILIES:
        raise tiny_names.refuse(like, "not a vision-language family tunekit builds", FAMILIES)
    model_type = VLM_FAMILIES[key]
    sizes = TinySizes(hidden_size, num_layers, num_heads, num_kv_heads, vocab_size, max_position_embeddings)
    if model_type in BUILDERS:
        module, builder = BUILDERS[model_type].split(":")
        return getattr(importlib.import_module(f"{__package__}.{module}"), builder)(out_dir, key, seed, sizes)
    return _build_qwen2_vl(out_dir, model_type, seed, sizes)


def _build_qwen2_vl(out_dir, model_type: str, seed: int, sizes: TinySizes) -> Path:
    from transformers import AutoModelForImageTextToText
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    fam = QWEN2_VL_TOKENS
    out, tokenizer, model_vocab = new_folder(out_dir, fam, QWEN2_VL_CHAT_TEMPLATE, sizes)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (*fam.special, *fam.extra)}
    config = _config(
        model_type,
        sizes.hidden_size,
        sizes.num_layers,
        sizes.num_heads,
        sizes.num_kv_heads,
        model_vocab,
        ids,
        sizes.max_position_embeddings,
    )
    model = random_model(AutoModelForImageTextToText, config, seed, fam, ids)
    model.save_pretrained(out)
    image_processor = Qwen2VLImageProcessorPil(
        size={"shortest_edge": TINY_MIN_PIXELS, "longest_edge": TINY_MAX_PIXELS}
    )
    image_processor.save_pretrained(out)
    save_tokenizer(out, tokenizer, fam)
    _check_processor(out)
    return out


def _check_processor(out: Path) -> None:
    """The saved folder must reload (tokenizer + image processor) with the model's image token."""
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    Qwen2VLImageProcessorPil.from_pretrained(out)
    cfg = json.loads((out / "config.json").read_text(encoding="utf-8"))
    got = AutoTokenizer.from_pretrained(out).convert_tokens_to_ids("<|image_pad|>")
    if got != cfg["image_token_id"]:
        raise ModelError(
            f"tiny-model: {out}: the tokenizer's <|image_pad|> id {got} is not the model's image_token_id "
            f"{cfg['image_token_id']} (tunekit.model.tiny_vlm needs fixing)."
        )


def describe_vlm(folder: str | os.PathLike) -> str:
    """A few lines about a built VLM folder, for the CLI."""
    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    text, vision = cfg.get("text_config", {}), cfg.get("vision_config", {})
    pre = json.loads((folder / "preprocessor_config.json").read_text(encoding="utf-8"))
    size = pre.get("size", {})
    template = {"qwen3_vl": "qwen3_vl_nothink (Instruct) / qwen3_vl (Thinking)", "qwen2_audio": "qwen2_audio"}.get(
        cfg.get("model_type"), "qwen2_vl"
    )
    if "audio_config" in cfg:
        audio = cfg["audio_config"]
        media = [
            f"  audio         layers {audio.get('encoder_layers')}, width {audio.get('d_model')}, mel bins "
            f"{audio.get('num_mel_bins')}",
            f"  processor     {pre.get('feature_extractor_type')} at {pre.get('sampling_rate')} Hz; audio token "
            f"<|AUDIO|> = {cfg.get('audio_token_index')}; template {template}",
        ]
    else:
        media = [
            f"  vision        depth {vision.get('depth')}, patch {vision.get('patch_size')}, merge {vision.get('spatial_merge_size')}",
            f"  processor     {pre.get('image_processor_type')} (PIL path), pixels {size.get('shortest_edge')}.."
            f"{size.get('longest_edge')}; image token <|image_pad|> = {cfg.get('image_token_id')}; template {template}",
        ]
    return "\n".join(
        [
            f"wrote {folder}",
            f"  architecture  {', '.join(cfg.get('architectures') or [])} (model_type {cfg.get('model_type')})",
            f"  language      hidden {text.get('hidden_size')}, layers {text.get('num_hidden_layers')}, heads "
            f"{text.get('num_attention_heads')}/{text.get('num_key_value_heads')}, vocab {text.get('vocab_size')}",
            *media,
            f"  weights       {(folder / 'model.safetensors').stat().st_size / 2**20:.2f} MiB",
        ]
    )
