"""Tiny random-weight Qwen2-VL and Qwen2.5-VL models, built locally in a few seconds.

Like :mod:`tunekit.tiny.text` for text families: the real transformers classes
(``Qwen2VLForConditionalGeneration``, ``Qwen2_5_VLForConditionalGeneration``) with tiny sizes, random
weights from a fixed seed, the byte-level BPE tokenizer of ``tokenizer.py`` trained on the shipped corpus and
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
from dataclasses import replace
from pathlib import Path

from tunekit.errors import ModelError

from .multimodal import DEFAULT_SIZES, QWEN_VL_SPECIAL, TinySizes, new_folder, random_model, save_tokenizer
from .names import VLM_FAMILIES
from .tokenizer import TOKENIZERS

#: Qwen2-VL's tokenizer: Qwen's with the vision tokens
QWEN2_VL_TOKENS = replace(TOKENIZERS["qwen"], name="qwen2_vl", template="qwen2_vl", special=QWEN_VL_SPECIAL)

#: Qwen/Qwen2-VL-7B-Instruct's chat_template (Qwen2.5-VL-7B-Instruct ships the same one), verbatim.
QWEN2_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages "
    "%}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful "
    "assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ "
    "message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == "
    "'image' or 'image' in content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% "
    "if add_vision_id %}Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% "
    "elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% "
    "if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif "
    "'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if "
    "add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
#: the tiny image processor's pixel budget: a 224x224 image gives (224/28)^2 = 64 image tokens at most
TINY_MAX_PIXELS = 224 * 224
TINY_MIN_PIXELS = 28 * 28


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


def build_tiny_qwen2_vl(
    out_dir: str | os.PathLike, like: str = "qwen2-vl", seed: int = 0, sizes: TinySizes = DEFAULT_SIZES
) -> Path:
    """Write a tiny random Qwen2-VL or Qwen2.5-VL (``like``) into ``out_dir``."""
    from transformers import AutoModelForImageTextToText
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    model_type = VLM_FAMILIES[like]
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
            f"{cfg['image_token_id']} (tunekit.tiny.qwen2_vl needs fixing)."
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
            f"  vision        depth {vision.get('depth')}, patch {vision.get('patch_size')}, "
            f"merge {vision.get('spatial_merge_size')}",
            f"  processor     {pre.get('image_processor_type')} (PIL path), pixels {size.get('shortest_edge')}.."
            f"{size.get('longest_edge')}; image token <|image_pad|> = {cfg.get('image_token_id')}; "
            f"template {template}",
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
