"""Qwen2-VL and Qwen2.5-VL: ``<image>`` → ``<|vision_start|>`` + n × ``<|image_pad|>`` + ``<|vision_end|>``.

n = the image's patch grid (t·h·w from the model's own image processor at ``image_min_pixels`` ..
``image_max_pixels``) divided by ``merge_size²``: the rule of ``Qwen2VLProcessor.replace_image_token``.
transformers 5.24 cannot build ``Qwen2VLProcessor`` without torchvision (its video processor needs it),
so the image processor is loaded explicitly as the PIL/numpy ``Qwen2VLImageProcessorPil`` and the
tokenizer is used directly; videos (which need the torchvision video processor) are refused by name.

Modules (transformers 5 ``Qwen2VLForConditionalGeneration``): vision tower ``model.visual.patch_embed`` +
``model.visual.blocks``, projector ``model.visual.merger``, language model ``model.language_model`` + ``lm_head``.
"""

from __future__ import annotations

from typing import Any

from ...errors import DataError
from . import MediaPlugin, open_image

VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"


class Qwen2VLPlugin(MediaPlugin):
    NAME = "qwen2_vl"
    TEMPLATES = ("qwen2_vl",)
    MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")
    VISION_TOWER = ("model.visual.patch_embed", "model.visual.blocks")
    PROJECTOR = ("model.visual.merger",)
    LANGUAGE_MODEL = ("model.language_model", "lm_head")
    MEDIA = ("images",)

    def __init__(self, image_processor, token_ids: dict[str, int], min_pixels: int, max_pixels: int):
        self.image_processor = image_processor
        self.token_ids = token_ids
        self.size = {"shortest_edge": min_pixels, "longest_edge": max_pixels}

    @classmethod
    def load(cls, cfg, path: str) -> "Qwen2VLPlugin":
        from transformers import AutoTokenizer
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        try:
            image_processor = Qwen2VLImageProcessorPil.from_pretrained(path)
        except OSError as exc:
            raise DataError(f"{path} has no image processor (preprocessor_config.json) for Qwen2-VL: {str(exc)[:200]}") from None
        tokenizer = AutoTokenizer.from_pretrained(path)
        ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)}
        missing = [t for t, i in ids.items() if i is None or i == tokenizer.unk_token_id]
        if missing:
            raise DataError(f"the tokenizer of {path} lacks Qwen2-VL's {', '.join(missing)}: is it a Qwen2-VL model?")
        return cls(image_processor, ids, cfg.image_min_pixels, cfg.image_max_pixels)

    def process_images(self, images: list[Any]) -> dict[str, Any]:
        return self.image_processor(images=images, size=self.size, return_tensors="pt")

    def image_token_counts(self, paths: list[str], where: str) -> list[int]:
        if not paths:
            return []
        grids = self.process_images([open_image(p, where) for p in paths])["image_grid_thw"]
        merge = self.image_processor.merge_size ** 2
        return [int(g.prod()) // merge for g in grids]

    def expand(self, text: str, counts: list[int], start: int) -> tuple[str, int]:
        """``text`` with each ``<image>`` expanded (the k-th uses ``counts[start + k]``); returns (text, next index)."""
        parts = text.split("<image>")
        out = [parts[0]]
        for k, rest in enumerate(parts[1:]):
            out.append(VISION_START + IMAGE_PAD * counts[start + k] + VISION_END + rest)
        return "".join(out), start + len(parts) - 1

    def media_token_ids(self) -> set[int]:
        return {self.token_ids[IMAGE_PAD], self.token_ids[VIDEO_PAD]}

    def collate(self, paths: list[str], input_ids) -> dict[str, Any]:
        """Model inputs of one batch: pixel patches + grids of every image (in order), and M-RoPE's token types."""
        out: dict[str, Any] = {}
        if paths:
            data = self.process_images([open_image(p, p) for p in paths])
            out["pixel_values"], out["image_grid_thw"] = data["pixel_values"], data["image_grid_thw"]
        types = (input_ids == self.token_ids[IMAGE_PAD]).long() + 2 * (input_ids == self.token_ids[VIDEO_PAD]).long()
        out["mm_token_type_ids"] = types
        return out


PLUGIN = Qwen2VLPlugin
