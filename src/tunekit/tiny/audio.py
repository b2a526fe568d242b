"""Tiny random-weight Qwen2-Audio (``Qwen2AudioForConditionalGeneration``), built locally in a few seconds.

The real transformers class with tiny sizes (a 2-layer Whisper-style audio encoder of width 32 over the full
30-second window of 128 mel bins, a 2-layer Qwen2 language model), random weights from a fixed seed, the
byte-level BPE tokenizer of ``tokenizer.py`` with Qwen2-Audio's special tokens (``<|AUDIO|>``, ``<|audio_bos|>``,
``<|audio_eos|>``), the official chat template (``Qwen2AudioProcessor.default_chat_template``, which
Qwen/Qwen2-Audio-7B-Instruct ships) and the ``WhisperFeatureExtractor`` of the real checkpoint (128 mel bins,
16 kHz; no torchvision or torchaudio needed). Nothing is downloaded.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from .multimodal import DEFAULT_SIZES, TinySizes, new_folder, random_model, save_tokenizer
from .tokenizer import TOKENIZERS

QWEN2_AUDIO_TOKENS = replace(
    TOKENIZERS["qwen"],
    name="qwen2_audio",
    template="qwen2_audio",
    extra=(),  # no tool tags
    special=TOKENIZERS["qwen"].special + ("<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>"),
)


def chat_template() -> str:
    """Qwen2-Audio-Instruct's chat template, as transformers' processor carries it."""
    from transformers.models.qwen2_audio.processing_qwen2_audio import Qwen2AudioProcessor

    return Qwen2AudioProcessor.default_chat_template.fget(None)


def _config(
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    vocab_size: int,
    ids: dict[str, int],
    max_positions: int,
):
    from transformers import AutoConfig

    text = dict(
        model_type="qwen2",
        hidden_size=hidden_size,
        intermediate_size=4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        vocab_size=vocab_size,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-6,
        hidden_act="silu",
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        initializer_range=0.02,
        tie_word_embeddings=False,
    )
    audio = dict(
        num_mel_bins=128,
        encoder_layers=2,
        encoder_attention_heads=2,
        encoder_ffn_dim=64,
        d_model=32,
        max_source_positions=1500,
        activation_function="gelu",
        initializer_range=0.02,
    )
    return AutoConfig.for_model(
        "qwen2_audio",
        text_config=text,
        audio_config=audio,
        audio_token_index=ids["<|AUDIO|>"],
        tie_word_embeddings=False,
    )


def build_tiny_qwen2_audio(
    out_dir: str | os.PathLike, like: str = "qwen2-audio", seed: int = 0, sizes: TinySizes = DEFAULT_SIZES
) -> Path:
    """Write a tiny random Qwen2-Audio (weights, tokenizer, chat template, feature extractor) into ``out_dir``."""
    from transformers import AutoModelForMultimodalLM, WhisperFeatureExtractor

    fam = QWEN2_AUDIO_TOKENS
    out, tokenizer, model_vocab = new_folder(out_dir, fam, chat_template(), sizes)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in fam.special}
    config = _config(
        sizes.hidden_size,
        sizes.num_layers,
        sizes.num_heads,
        sizes.num_kv_heads,
        model_vocab,
        ids,
        sizes.max_position_embeddings,
    )
    model = random_model(AutoModelForMultimodalLM, config, seed, fam, ids)
    model.save_pretrained(out)
    WhisperFeatureExtractor(
        feature_size=128,
        sampling_rate=16000,
        hop_length=160,
        chunk_length=30,
        n_fft=400,
        padding_value=0.0,
        return_attention_mask=True,
    ).save_pretrained(out)
    save_tokenizer(out, tokenizer, fam)
    return out
