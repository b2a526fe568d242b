"""LLaVA-1.5 (``llava``): ``<image>`` → n × ``<image>`` + ``"\n"``, n from ``LlavaProcessor``'s own rule.

n = ``(crop_height // patch_size) · (crop_width // patch_size) + num_additional_image_tokens``, minus one with
``vision_feature_select_strategy: default`` (CLS dropped): 576 for the 336-pixel CLIP of llava-1.5-7b-hf. It is
read off ``LlavaProcessor.replace_image_token`` for each processed image (``hf_processor``), so it follows the
model folder's processor settings.

Where the images go: as the official llava-hf chat template renders a message (all image parts first, each as
``'<image>\n'``, then the text parts each followed by a space), a message's images come first, each run followed
by ``"\n"``, then its text pieces joined by a space, wherever the placeholders stand in the text. So
``"What are they doing?<image>"`` trains as ``"<image>…\nWhat are they doing?"``, exactly what the model sees at
inference. LLaMA-Factory's ``llava`` plugin keeps each placeholder in place with no newline.

Modules (transformers 5 ``LlavaForConditionalGeneration``): vision tower ``model.vision_tower`` (CLIP), projector
``model.multi_modal_projector``, language model ``model.language_model`` + ``lm_head``.
"""

from __future__ import annotations

from .hf_processor import ProcessorPlugin


class LlavaPlugin(ProcessorPlugin):
    NAME = "llava"
    TEMPLATES = ("llava",)
    MODEL_TYPES = ("llava",)
    PROCESSOR = "LlavaProcessor"
    VISION_TOWER = ("model.vision_tower",)
    PROJECTOR = ("model.multi_modal_projector",)
    LANGUAGE_MODEL = ("model.language_model", "lm_head")
    MEDIA = ("images",)
    #: how a message with images is laid out, as the official template does: (after each image block, before the
    #: text, between text pieces); LLaVA-1.5: images first, each followed by "\n", the text pieces joined by " "
    layout = ("\n", "", " ")

    def image_block(self, n: int) -> str:
        return self.image_token * n + self.layout[0]

    def expand(self, text: str, counts: list[int], start: int) -> tuple[str, int]:
        pieces = text.split("<image>")
        n = len(pieces) - 1
        if n == 0:
            return text, start
        blocks = "".join(self.image_block(counts[start + k]) for k in range(n))
        return blocks + self.layout[1] + self.layout[2].join(p for p in pieces if p), start + n


PLUGIN = LlavaPlugin
