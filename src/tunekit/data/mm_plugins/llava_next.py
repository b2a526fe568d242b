"""LLaVA-NeXT / LLaVA-1.6 (``llava_next``, ``llava_next_mistral``): ``<image>`` → n × ``<image>`` + ``"\n"``, n from
the anyres rule.

Each image is resized to the best resolution of ``image_grid_pinpoints`` and cut into crop-size tiles, plus
the whole image at crop size; n = the base tile's patches + the unpadded patches of the tile grid + one newline
feature per row (``LlavaNextProcessor._get_number_of_features``, which ``replace_image_token`` calls with the
image's original size), minus one with ``vision_feature_select_strategy: default``. The model gets
``pixel_values`` (tiles per image, padded to the batch's most) and ``image_sizes``.

Variants: LLaVA-NeXT was released on several language models, each with its own chat format; the template says
which (``llava_next``: Vicuna, text ``llama``; ``llava_next_mistral``: Mistral, text ``mistral``), and a template
whose language model is not the folder's (``text_config.model_type``) is an error naming the right one. As the
official llava-hf templates render a message, its images come first (each ``<image>\n``), then its text pieces:
joined by a space (Vicuna: each text part + ``' '``) or directly (Mistral: ``content['text']`` only).

Modules (transformers 5 ``LlavaNextForConditionalGeneration``): vision tower ``model.vision_tower``, projector
``model.multi_modal_projector`` + ``model.image_newline`` (the learned row-end embedding, trained with the
projector), language model ``model.language_model`` + ``lm_head``.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...errors import ConfigError
from .llava import LlavaPlugin


class LlavaNextPlugin(LlavaPlugin):
    NAME = "llava_next"
    TEMPLATES = ("llava_next", "llava_next_mistral")
    MODEL_TYPES = ("llava_next",)
    PROCESSOR = "LlavaNextProcessor"
    PROJECTOR = ("model.multi_modal_projector", "model.image_newline")
    MODEL_INPUTS = ("pixel_values", "image_sizes")
    #: template -> the language models (``text_config.model_type``) it is the chat format of
    TEXT_MODEL_TYPES = {"llava_next": ("llama",), "llava_next_mistral": ("mistral",)}
    #: template -> how a message's text pieces are joined after its images (the official template's rule)
    TEXT_JOIN = {"llava_next": " ", "llava_next_mistral": ""}
    text_join = " "

    @classmethod
    def load(cls, cfg, path: str) -> "LlavaNextPlugin":
        text_type = text_model_type(path)
        wanted = cls.TEXT_MODEL_TYPES.get(cfg.template, ())
        if text_type is not None and wanted and text_type not in wanted:
            fits = [t for t, types in cls.TEXT_MODEL_TYPES.items() if text_type in types]
            fix = f"set template: {fits[0]}" if fits else "no tunekit template has its chat format yet"
            raise ConfigError(f"template '{cfg.template}' is the chat format of LLaVA-NeXT on {', '.join(wanted)}, but "
                              f"{path} is LLaVA-NeXT on {text_type} (text_config.model_type): {fix}.")
        plugin = super().load(cfg, path)
        plugin.text_join = cls.TEXT_JOIN.get(cfg.template, " ")
        return plugin

    def expand(self, text: str, counts: list[int], start: int) -> tuple[str, int]:
        pieces = text.split("<image>")
        n = len(pieces) - 1
        if n == 0:
            return text, start
        blocks = "".join(self.image_block(counts[start + k]) for k in range(n))
        return blocks + self.text_join.join(p for p in pieces if p), start + n


def text_model_type(path: str) -> str | None:
    """``text_config.model_type`` of the LLaVA-NeXT folder at ``path`` (None when not a readable local folder)."""
    try:
        cfg = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return (cfg.get("text_config") or {}).get("model_type")


PLUGIN = LlavaNextPlugin
