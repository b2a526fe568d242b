"""Multimodal options (vision-language models): media resolution, where media files are, what is frozen.

LLaMA-Factory's names. The media options (``image_*_pixels``, ``video_*``, ``audio_sampling_rate``) default to None:
the model folder's processor settings apply, as at inference (``tunekit.data.mm_plugins.settings`` resolves them);
a value set here overrides the folder's, and the run says so. Which modules are the vision tower, the projector and
the language model is declared per model family in ``tunekit.data.mm_plugins`` (docs/multimodal.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pydantic import Field

from ..problems import Problem, problem
from .base import OptionGroup

if TYPE_CHECKING:  # annotations only: the schema combines this group
    from ..schema import Config


class MultimodalOptions(OptionGroup):
    GROUP = "multimodal"
    TITLE = "Multimodal"

    image_max_pixels: int | None = Field(
        None,
        ge=1,
        description="Largest image area (height x width, pixels) given to the image processor; larger images are "
        "scaled down (fewer image tokens). Default: the model folder's processor setting (Qwen2-VL: its max_pixels; "
        "families without one: images as they are). Qwen2-VL: one token per 28x28 pixels.",
    )
    image_min_pixels: int | None = Field(
        None,
        ge=1,
        description="Smallest image area (pixels); smaller images are scaled up. Default: the model folder's "
        "processor setting (Qwen2-VL: its min_pixels).",
    )
    video_max_pixels: int | None = Field(
        None,
        ge=1,
        description="Largest area of a video frame (pixels), each frame scaled down before the video processor. "
        "Default: none (the video processor's own limits).",
    )
    video_min_pixels: int | None = Field(
        None,
        ge=1,
        description="Smallest area of a video frame (pixels), each frame scaled up before the video processor. "
        "Default: none (the video processor's own limits).",
    )
    video_fps: float | None = Field(
        None,
        gt=0,
        description="Frames sampled per second of video. Default: the model folder's video processor fps (else "
        "2, Qwen-VL's).",
    )
    video_maxlen: int | None = Field(
        None,
        ge=1,
        description="Most frames sampled from one video. Default: the model folder's video processor max_frames "
        "(Qwen-VL's class default: 768).",
    )
    audio_sampling_rate: int | None = Field(
        None,
        ge=1,
        description="Sampling rate audio is resampled to (Hz). Default: the model folder's feature extractor's.",
    )
    use_audio_in_video: bool = Field(
        False, description="Also use the audio track of each video (audio-visual families)."
    )
    media_dir: str | None = Field(
        None,
        description="Folder that relative image/video/audio paths in the data are resolved against (default: "
        "dataset_dir).",
    )
    freeze_vision_tower: bool = Field(
        True, description="Keep the vision tower frozen. With LoRA, false also puts adapters on its linear layers."
    )
    freeze_multi_modal_projector: bool = Field(
        True,
        description="Keep the multimodal projector (vision → language, e.g. Qwen2-VL's merger) frozen. With LoRA, "
        "false also puts adapters on its linear layers.",
    )
    freeze_language_model: bool = Field(
        False, description="Keep the language model frozen (train only the unfrozen vision parts)."
    )


def multimodal_problems(cfg: Config) -> Iterator[Problem]:
    """Cross-field rules of this group (``Config._check_combinations`` calls it)."""
    for kind in ("image", "video"):
        lo, hi = getattr(cfg, f"{kind}_min_pixels"), getattr(cfg, f"{kind}_max_pixels")
        if lo is not None and hi is not None and lo > hi:
            low, high = f"{kind}_min_pixels", f"{kind}_max_pixels"
            yield problem("pixels_min_over_max", (low, high), low=low, lo=lo, high=high, hi=hi)
    frozen = (cfg.freeze_vision_tower, cfg.freeze_multi_modal_projector, cfg.freeze_language_model)
    if all(frozen) and cfg.finetuning_type in ("full", "lora"):
        yield problem("all_frozen", ("freeze_vision_tower", "freeze_multi_modal_projector", "freeze_language_model"))
