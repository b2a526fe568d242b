"""Vision-language models: which parts train (``freeze_*`` options) and where LoRA goes.

The parts of each family (vision tower, projector, language model) are declared by its plugin in
``tunekit.data.mm_plugins`` (module-name prefixes). Rules:

- full fine-tuning: every parameter of an unfrozen part trains, none of a frozen part (defaults:
  vision tower and projector frozen, language model trained, as LLaMA-Factory);
- LoRA with ``lora_target: all``: adapters on the linear layers of the unfrozen parts only (by default
  the language model's, never the LM head); an explicit ``lora_target`` list is used as given;
- QLoRA (``quantization_bit``): only the language model is quantized (:func:`quantization_skip_modules`).
"""

from __future__ import annotations

import importlib
from typing import Any, Optional

from ..errors import ConfigError


def is_multimodal_config(config) -> bool:
    return getattr(config, "vision_config", None) is not None or getattr(config, "audio_config", None) is not None


def plugin_class(cfg) -> Optional[type]:
    from ..data.mm_plugins import FAMILIES

    module = FAMILIES.get(cfg.template or "")
    return importlib.import_module(f"tunekit.data.mm_plugins.{module}").PLUGIN if module else None


def _in(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def frozen_prefixes(cfg, plugin) -> list[str]:
    out: list[str] = []
    if cfg.freeze_vision_tower:
        out += plugin.VISION_TOWER
    if cfg.freeze_multi_modal_projector:
        out += plugin.PROJECTOR
    if cfg.freeze_language_model:
        out += plugin.LANGUAGE_MODEL
    return out


def apply_freeze(model, cfg, plugin) -> None:
    """Full fine-tuning of a VLM: frozen parts get ``requires_grad = False``; a part the plugin does not find is an error."""
    names = [n for n, _ in model.named_parameters()]
    for part in (*plugin.VISION_TOWER, *plugin.PROJECTOR, *plugin.LANGUAGE_MODEL):
        if not any(_in(n, [part]) for n in names):
            raise ConfigError(f"the {plugin.NAME} family declares the module '{part}', which {type(model).__name__} does not "
                              f"have (a different transformers version?); tunekit.data.mm_plugins.{plugin.NAME} needs updating.")
    frozen = frozen_prefixes(cfg, plugin)
    for name, p in model.named_parameters():
        p.requires_grad_(not _in(name, frozen))


def freeze_scope(model, cfg) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Freeze-tuning of a VLM: (the language model's module prefixes, whose layers freeze_trainable_layers counts;
    the vision tower / projector prefixes that train by the freeze_* options). ``((), ())`` for a text model."""
    plugin = plugin_class(cfg) if is_multimodal_config(model.config) else None
    if plugin is None:
        return (), ()
    if cfg.freeze_language_model:
        raise ConfigError("finetuning_type freeze trains the language model's last layers, but freeze_language_model is "
                          "true: set freeze_language_model: false, or use finetuning_type full to train only the vision "
                          "tower / projector.")
    trained = (() if cfg.freeze_vision_tower else plugin.VISION_TOWER) + (() if cfg.freeze_multi_modal_projector else plugin.PROJECTOR)
    return tuple(plugin.LANGUAGE_MODEL), tuple(trained)


def lora_targets(model, cfg, plugin) -> list[str]:
    """Full names of the linear layers that get LoRA under ``lora_target: all`` (see the module docstring)."""
    import torch

    frozen = frozen_prefixes(cfg, plugin)
    parts = (*plugin.VISION_TOWER, *plugin.PROJECTOR, *plugin.LANGUAGE_MODEL)
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and _in(n, parts)
             and not _in(n, frozen) and n != "lm_head" and not n.endswith(".lm_head")]
    if not names:
        raise ConfigError("lora_target: all finds no linear layer to adapt: every part is frozen. Set "
                          "freeze_language_model: false (or unfreeze the vision tower / projector).")
    return names


def quantization_skip_modules(cfg) -> Optional[list[str]]:
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
