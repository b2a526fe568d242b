"""Qwen2-VL and Qwen2.5-VL: ``<image>`` → ``<|vision_start|>`` + n × ``<|image_pad|>`` + ``<|vision_end|>``.

n = the image's patch grid (t·h·w from the model's own image processor at its own ``min_pixels`` .. ``max_pixels``,
or ``image_min_pixels`` .. ``image_max_pixels`` where set: ``mm_plugins.settings``) divided by ``merge_size²``:
the rule of ``Qwen2VLProcessor.replace_image_token``.
transformers 5.24 cannot build ``Qwen2VLProcessor`` without torchvision (its video processor needs it),
so the image processor is loaded explicitly as the PIL/numpy ``Qwen2VLImageProcessorPil`` and the
tokenizer is used directly.

``<video>`` → ``<|vision_start|>`` + n × ``<|video_pad|>`` + ``<|vision_end|>``, n = the clip's grid t·h·w /
``merge_size²`` from the video processor's math (``mm_plugins.video``: PyAV frames at ``video_fps`` up to
``video_maxlen`` (default: the video processor's ``fps`` / ``max_frames``), scaled into ``video_min_pixels`` ..
``video_max_pixels`` as LLaMA-Factory does where set, then the video processor's own size limits). Qwen2.5-VL also
gets ``second_per_grid_ts`` (temporal patch / sampled fps).

Modules (transformers 5 ``Qwen2VLForConditionalGeneration``): vision tower ``model.visual.patch_embed`` +
``model.visual.blocks``, projector ``model.visual.merger``, language model ``model.language_model`` + ``lm_head``.
"""

from __future__ import annotations

from typing import Any

from ...config.problems import Said
from ...config.schema import Config
from . import MediaPlugin, from_preprocessor_config, model_type_of, open_image, special_token_ids
from .settings import image_limits, video_options
from .video import VideoClip, VideoSpec, batch_videos, qwen2_resize, read_clip, video_grid

VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"
#: ``Qwen2VLVideoProcessor``'s class defaults (a folder's saved video/image processor config overrides them)
VIDEO_DEFAULTS = dict(
    min_pixels=128 * 28 * 28,
    max_pixels=28 * 28 * 768,
    patch_size=14,
    temporal_patch_size=2,
    merge_size=2,
    image_mean=(0.48145466, 0.4578275, 0.40821073),
    image_std=(0.26862954, 0.26130258, 0.27577711),
    rescale_factor=1 / 255,
)


class Qwen2VLPlugin(MediaPlugin):
    NAME = "qwen2_vl"
    TEMPLATES = ("qwen2_vl",)
    MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")
    VISION_TOWER = ("model.visual.patch_embed", "model.visual.blocks")
    PROJECTOR = ("model.visual.merger",)
    LANGUAGE_MODEL = ("model.language_model", "lm_head")
    MEDIA = ("images", "videos")
    VIDEO_DEFAULTS = VIDEO_DEFAULTS
    resize_rule = staticmethod(qwen2_resize)

    def __init__(
        self,
        image_processor,
        token_ids: dict[str, int],
        size: dict[str, int],
        video_spec: VideoSpec = None,
        video_options: dict[str, Any] = None,
        model_type: str = "",
    ):
        self.image_processor = image_processor
        self.token_ids = token_ids
        self.size = size  # {"shortest_edge": min pixels, "longest_edge": max pixels} (mm_plugins.settings)
        self.video_spec = video_spec
        self.video_options = video_options or {}
        self.model_type = model_type

    @classmethod
    def load(cls, cfg: Config, path: str) -> Qwen2VLPlugin:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        image_processor = from_preprocessor_config(
            Qwen2VLImageProcessorPil, path, Said("part_mm_image_processor"), "Qwen2-VL"
        )
        ids = special_token_ids(path, (VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD), "Qwen2-VL")
        size = image_limits(cfg, dict(image_processor.size), path)  # the folder's, unless image_*_pixels are set
        return cls(
            image_processor,
            ids,
            size,
            VideoSpec.load(path, cls.VIDEO_DEFAULTS),
            video_options(cfg, path),
            model_type_of(path)[0] or "",
        )

    def process_images(self, images: list[Any]) -> dict[str, Any]:
        return self.image_processor(images=images, size=self.size, return_tensors="pt")

    def image_token_counts(self, paths: list[str], where: str) -> list[int]:
        if not paths:
            return []
        grids = self.process_images([open_image(p, where) for p in paths])["image_grid_thw"]
        merge = self.image_processor.merge_size**2
        return [int(g.prod()) // merge for g in grids]

    def expand(self, text: str, counts: list[int], start: int) -> tuple[str, int]:
        """``text`` with each ``<image>`` expanded (the k-th uses ``counts[start + k]``); returns (text, next
        index)."""
        parts = text.split("<image>")
        out = [parts[0]]
        for k, rest in enumerate(parts[1:]):
            out.append(VISION_START + IMAGE_PAD * counts[start + k] + VISION_END + rest)
        return "".join(out), start + len(parts) - 1

    def media_token_ids(self) -> set[int]:
        return {self.token_ids[IMAGE_PAD], self.token_ids[VIDEO_PAD]}

    def clip(self, path: str, where: str) -> VideoClip:
        """The video at ``path`` sampled and regularised with the configured ``video_*`` options."""
        return read_clip(path, where, **self.video_options)

    def video_text(self, clip: VideoClip) -> str:
        """What one ``<video>`` becomes: the video tokens of the clip's grid between the vision markers."""
        n = self.video_spec.tokens(video_grid(clip, self.video_spec, self.resize_rule))
        return VISION_START + VIDEO_PAD * n + VISION_END

    def video_expansions(self, paths: list[str], where: str) -> list[str]:
        """The text each of a record's videos becomes (stored with the sample, spliced in for ``<video>``)."""
        return [self.video_text(self.clip(p, where)) for p in paths]

    def collate(self, paths: list[str], input_ids, videos: list[str] = ()) -> dict[str, Any]:
        """Model inputs of one batch: pixel patches + grids of every image and video (in order), M-RoPE's token
        types."""
        out: dict[str, Any] = {}
        if paths:
            data = self.process_images([open_image(p, p) for p in paths])
            out["pixel_values"], out["image_grid_thw"] = data["pixel_values"], data["image_grid_thw"]
        if videos:
            out.update(
                batch_videos(
                    [self.clip(p, p) for p in videos],
                    self.video_spec,
                    self.resize_rule,
                    seconds_per_grid=self.model_type == "qwen2_5_vl",
                )
            )
        types = (input_ids == self.token_ids[IMAGE_PAD]).long() + 2 * (input_ids == self.token_ids[VIDEO_PAD]).long()
        out["mm_token_type_ids"] = types
        return out


PLUGIN = Qwen2VLPlugin
