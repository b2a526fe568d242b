"""LLaVA-NeXT / LLaVA-1.6 (``llava_next``): ``<image>`` → n × ``<image>`` + ``"\n"``, n from the anyres rule.

Each image is resized to the best resolution of ``image_grid_pinpoints`` and cut into crop-size tiles, plus
the whole image at crop size; n = the base tile's patches + the unpadded patches of the tile grid + one newline
feature per row (``LlavaNextProcessor._get_number_of_features``, which ``replace_image_token`` calls with the
image's original size), minus one with ``vision_feature_select_strategy: default``. The model gets
``pixel_values`` (tiles per image, padded to the batch's most) and ``image_sizes``.

Modules (transformers 5 ``LlavaNextForConditionalGeneration``): vision tower ``model.vision_tower``, projector
``model.multi_modal_projector`` + ``model.image_newline`` (the learned row-end embedding, trained with the
projector), language model ``model.language_model`` + ``lm_head``.
"""

from __future__ import annotations

from .llava import LlavaPlugin


class LlavaNextPlugin(LlavaPlugin):
    NAME = "llava_next"
    TEMPLATES = ("llava_next",)
    MODEL_TYPES = ("llava_next",)
    PROCESSOR = "LlavaNextProcessor"
    PROJECTOR = ("model.multi_modal_projector", "model.image_newline")
    MODEL_INPUTS = ("pixel_values", "image_sizes")


PLUGIN = LlavaNextPlugin
