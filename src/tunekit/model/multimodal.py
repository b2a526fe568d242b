"""Vision-language models: the model class, the family plugin, what QLoRA leaves unquantized.

The parts of each family (vision tower, projector, language model) are declared by its plugin in
``tunekit.data.mm_plugins`` (module-name prefixes). Which parts train (``freeze_*``, defaults: vision tower and
projector frozen, language model trained, as LLaMA-Factory) is one selection for every method, in
``tunekit.model.trainable``. QLoRA (``quantization_bit``): only the language model is quantized
(:func:`quantization_skip_modules`).
"""

from __future__ import annotations

import importlib
from typing import Any

from ..config.schema import Config
from ..data.mm_plugins import FAMILIES


def is_multimodal_config(config) -> bool:
    return getattr(config, "vision_config", None) is not None or getattr(config, "audio_config", None) is not None


def plugin_class(cfg: Config) -> type | None:
    module = FAMILIES.get(cfg.template or "")
    return importlib.import_module(f"tunekit.data.mm_plugins.{module}").PLUGIN if module else None


def quantization_skip_modules(cfg: Config) -> list[str] | None:
    """Modules bitsandbytes leaves unquantized (``llm_int8_skip_modules``) for QLoRA on a VLM: the vision tower and the
    projector (small next to the language model, and what the image features depend on; LLaMA-Factory 0.9.5 quantizes
    them too) and ``lm_head`` (transformers' own default, which a given list replaces). ``None`` (transformers'
    defaults) for a text model."""
    plugin = plugin_class(cfg)
    if plugin is None:
        return None
    return ["lm_head", *plugin.VISION_TOWER, *plugin.PROJECTOR]


def model_class(config) -> Any:
    """The transformers auto class for ``config``: image-text-to-text for VLMs, the multimodal LM class for audio-text
    models (Qwen2-Audio is not an image-text-to-text model), causal LM otherwise."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoModelForMultimodalLM

    if getattr(config, "vision_config", None) is None and getattr(config, "audio_config", None) is not None:
        return AutoModelForMultimodalLM
    return AutoModelForImageTextToText if is_multimodal_config(config) else AutoModelForCausalLM
