"""LLaVA-NeXT / LLaVA-1.6 (``llava_next``, ``llava_next_mistral``): ``<image>`` → n × ``<image>`` + ``"\n"``, n from
the anyres rule.

Each image is resized to the best resolution of ``image_grid_pinpoints`` and cut into crop-size tiles, plus
the whole image at crop size; n = the base tile's patches + the unpadded patches of the tile grid + one newline
feature per row (``LlavaNextProcessor._get_number_of_features``, which ``replace_image_token`` calls with the
image's original size), minus one with ``vision_feature_select_strategy: default``. The model gets
``pixel_values`` (tiles per image, padded to the batch's most) and ``image_sizes``.

Variants: LLaVA-NeXT was released on several language models, each with its own chat format; the template says
which (``llava_next``: Vicuna; ``llava_next_mistral``: Mistral; ``llava_next_llama3``: Llama 3), and a template that
is not the folder's (its ``text_config.model_type`` and its chat template) is an error naming the right one. As the
official llava-hf templates render a message, its images come first, then its text pieces: Vicuna ``<image>\n``
per image, text parts each followed by ``' '``; Mistral ``<image>\n`` per image, text parts back to back; Llama 3
``<image>`` per image, then ``"\n"`` + the text.

Modules (transformers 5 ``LlavaNextForConditionalGeneration``): vision tower ``model.vision_tower``, projector
``model.multi_modal_projector`` + ``model.image_newline`` (the learned row-end embedding, trained with the
projector), language model ``model.language_model`` + ``lm_head``.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...config.problems import Said
from ...config.schema import Config
from ...errors import ConfigError
from .llava import LlavaPlugin


class LlavaNextPlugin(LlavaPlugin):
    NAME = "llava_next"
    TEMPLATES = ("llava_next", "llava_next_mistral", "llava_next_llama3")
    MODEL_TYPES = ("llava_next",)
    PROCESSOR = "LlavaNextProcessor"
    PROJECTOR = ("model.multi_modal_projector", "model.image_newline")
    MODEL_INPUTS = ("pixel_values", "image_sizes")
    #: template -> the language models (``text_config.model_type``) it is the chat format of
    TEXT_MODEL_TYPES = {"llava_next": ("llama",), "llava_next_mistral": ("mistral",), "llava_next_llama3": ("llama",)}
    #: template -> text its official chat template holds (tells Vicuna's from Llama 3's, both on ``llama``)
    CHAT_MARKERS = {
        "llava_next": "ASSISTANT:",
        "llava_next_mistral": "[INST]",
        "llava_next_llama3": "<|start_header_id|>",
    }
    #: template -> (after each image's tokens, before the text, between text pieces): the official template's rule
    LAYOUT = {"llava_next": ("\n", "", " "), "llava_next_mistral": ("\n", "", ""), "llava_next_llama3": ("", "\n", "")}

    @classmethod
    def fits(cls, template: str, text_type: str | None, chat_template: str | None) -> bool:
        """Whether ``template`` is the chat format of a LLaVA-NeXT folder with this language model / chat template."""
        types = cls.TEXT_MODEL_TYPES.get(template, ())
        marker = cls.CHAT_MARKERS.get(template)
        return (text_type is None or text_type in types) and (not chat_template or marker in chat_template)

    @classmethod
    def load(cls, cfg: Config, path: str) -> LlavaNextPlugin:
        plugin = super().load(cfg, path)
        text_type, chat_template = text_model_type(path), getattr(plugin.processor, "chat_template", None)
        if not cls.fits(cfg.template, text_type, chat_template):
            fits = [t for t in cls.TEMPLATES if cls.fits(t, text_type, chat_template)]
            fix = Said("part_set_template", template=fits[0]) if fits else Said("part_no_template_fits")
            types, variant = "/".join(cls.TEXT_MODEL_TYPES[cfg.template]), VARIANT[cfg.template]
            said = Said(
                "mm_llava_next_variant",
                template=cfg.template,
                types=types,
                variant=variant,
                path=path,
                text_type=str(text_type),
                fix=fix,
            )
            raise ConfigError(said)
        plugin.layout = cls.LAYOUT[cfg.template]
        return plugin


VARIANT = {"llava_next": "Vicuna", "llava_next_mistral": "Mistral", "llava_next_llama3": "Llama 3"}


def text_model_type(path: str) -> str | None:
    """``text_config.model_type`` of the LLaVA-NeXT folder at ``path`` (None when not a readable local folder)."""
    try:
        cfg = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return (cfg.get("text_config") or {}).get("model_type")


PLUGIN = LlavaNextPlugin
