"""Families whose processor transformers can build without torchvision (LLaVA-1.5, LLaVA-NeXT, Gemma 3).

The family's own processor is loaded from the model folder (``AutoProcessor``: ``LlavaProcessor`` ... on
transformers' PIL/numpy image processor) and used for everything the token layout depends on:

- each image goes through ``processor.image_processor`` as it is, as at inference (these processors have no pixel
  limits of their own); only where ``image_min_pixels`` / ``image_max_pixels`` are set is it first resized into
  them, as LLaMA-Factory does (:func:`fit_pixels`; the run says so once, ``mm_plugins.settings``);
- how many tokens an image becomes is what the processor's own ``replace_image_token`` writes for it (the
  function ``processor(text=..., images=...)`` calls at inference): LLaVA's fixed ``(crop / patch)²`` (minus
  CLS), LLaVA-NeXT's anyres tiles from ``image_grid_pinpoints`` (``_get_number_of_features``), Gemma 3's
  ``image_seq_length`` (= the model's ``mm_tokens_per_image``);
- the batch's model inputs are the image processor's outputs (``pixel_values``, ``image_sizes`` ...).

A subclass says how a placeholder is written out (``expand``) and which processor it expects.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ...config.problems import Said
from ...config.schema import Config
from ...errors import DataError
from . import MediaPlugin, open_image
from .settings import choose


def fit_pixels(image, min_pixels: int | None, max_pixels: int | None):
    """LLaMA-Factory's resize before the processor: scale down to ``max_pixels`` / up to ``min_pixels`` (area); a
    limit that is None (the option unset: the processor's own rule alone, as at inference) is not applied."""
    area = image.width * image.height
    for limit, outside in (
        (max_pixels, max_pixels is not None and area > max_pixels),
        (min_pixels, min_pixels is not None and area < min_pixels),
    ):
        if outside:
            factor = math.sqrt(limit / area)
            image = image.resize((max(1, int(image.width * factor)), max(1, int(image.height * factor))))
            area = image.width * image.height
    return image


def pixel_limits(cfg: Config, path: str) -> tuple[int | None, int | None]:
    """``(image_min_pixels, image_max_pixels)`` of a family whose processor has no pixel limits: None unless set (an
    option that is set resizes images before the processor, which the run says once)."""
    return (
        choose(cfg, "image_min_pixels", None, path, "pixel limit (none: images as they are)"),
        choose(cfg, "image_max_pixels", None, path, "pixel limit (none: images as they are)"),
    )


class ProcessorPlugin(MediaPlugin):
    """A family served by its transformers processor class (``PROCESSOR``); see the module docstring."""

    PROCESSOR: ClassVar[str] = ""
    #: image-processor outputs the model takes (the rest, e.g. Gemma 3's ``num_crops``, are dropped)
    MODEL_INPUTS: ClassVar[tuple[str, ...]] = ("pixel_values",)

    def __init__(self, processor, min_pixels: int | None, max_pixels: int | None):
        self.processor = processor
        self.min_pixels, self.max_pixels = min_pixels, max_pixels
        self.image_token = self.media_token(processor)  # the token a placeholder is repeated as
        self.image_token_id = processor.tokenizer.convert_tokens_to_ids(self.image_token)

    @staticmethod
    def media_token(processor) -> str:
        """The image token the processor repeats (LLaVA: ``processor.image_token``, ``<image>`` unless configured)."""
        return processor.image_token

    @classmethod
    def load(cls, cfg: Config, path: str) -> ProcessorPlugin:
        from pathlib import Path

        from transformers import AutoProcessor

        folder = Path(path)
        if folder.is_dir() and not any(
            (folder / f).is_file() for f in ("processor_config.json", "preprocessor_config.json")
        ):
            raise DataError(Said("mm_no_image_processor", path=path, family=cls.NAME))
        try:
            processor = AutoProcessor.from_pretrained(path)
        except (OSError, ValueError, ImportError) as exc:
            raise DataError(
                Said("mm_processor_unloadable", path=path, family=cls.NAME, error=str(exc)[:240])
            ) from None
        if type(processor).__name__ != cls.PROCESSOR:
            found, template = type(processor).__name__, str(cfg.template)
            raise DataError(
                Said("mm_other_processor", path=path, found=found, template=template, processor=cls.PROCESSOR)
            )
        plugin = cls(processor, *pixel_limits(cfg, path))
        if plugin.image_token_id in (None, processor.tokenizer.unk_token_id):
            raise DataError(Said("mm_no_image_token", path=path, token=plugin.image_token, family=cls.NAME))
        plugin.check(path)
        return plugin

    def check(self, path: str) -> None:
        """Family-specific checks of the loaded processor (override)."""

    def images(self, paths: list[str], where: str) -> dict[str, Any]:
        imgs = [fit_pixels(open_image(p, where), self.min_pixels, self.max_pixels) for p in paths]
        return self.processor.image_processor(images=imgs, return_tensors="pt")

    def image_token_counts(self, paths: list[str], where: str) -> list[int]:
        if not paths:
            return []
        inputs = self.images(paths, where)
        return [self.processor.replace_image_token(inputs, i).count(self.image_token) for i in range(len(paths))]

    def image_block(self, n: int) -> str:
        """What one image's placeholder becomes, given its token count (override)."""
        raise NotImplementedError

    def expand(self, text: str, counts: list[int], start: int) -> tuple[str, int]:
        parts = text.split("<image>")
        out = [parts[0]]
        for k, rest in enumerate(parts[1:]):
            out.append(self.image_block(counts[start + k]) + rest)
        return "".join(out), start + len(parts) - 1

    def media_token_ids(self) -> set[int]:
        return {self.image_token_id}

    def collate(self, paths: list[str], input_ids) -> dict[str, Any]:
        if not paths:
            return {}
        data = self.images(paths, "batch")
        return {k: data[k] for k in self.MODEL_INPUTS}
