"""Videos for the Qwen-VL families without torchvision: PyAV decoding, LLaMA-Factory's frame sampling, and the
model's own video processor math (resize, rescale, normalise, patchify) in numpy/PIL.

transformers 5.24's ``Qwen2VLVideoProcessor`` / ``Qwen3VLVideoProcessor`` need torchvision, whose CPU wheels
break imports here, so :func:`video_patches` reproduces their ``_preprocess`` in one function:

1. frames sampled at ``video_fps`` up to ``video_maxlen`` (LLaMA-Factory's ``_get_video_sample_indices``),
   each frame scaled into ``video_min_pixels`` .. ``video_max_pixels`` where set (LLaMA-Factory's
   ``_preprocess_image``; default: the frames as decoded, ``mm_plugins.settings``) and Qwen2-VL's 28-pixel /
   aspect-ratio guards, an odd count padded by repeating the last frame (:func:`read_clip`);
2. one target size for the whole clip from the family's ``smart_resize`` (Qwen2-VL: per frame; Qwen3-VL: the
   frame count is part of the pixel budget), bicubic resize, ``x * rescale_factor``, ``(x - mean) / std``;
3. the video processor's ``patchify``: ``(T, C, H, W)`` -> ``(T/tp * H/p * W/p, C * tp * p * p)`` with the
   same axis order, and ``video_grid_thw = (T/tp, H/p, W/p)``.

The grid (hence the token count) is exactly the processor's; pixel values differ from the torchvision path
only by the resize kernel (PIL's bicubic, as the PIL image processors use, instead of torchvision's).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...config.problems import Said
from ...errors import DataError
from . import require_av


@dataclasses.dataclass
class VideoClip:
    """A decoded, sampled and regularised video."""

    frames: list  # RGB PIL images, an even number (the last repeated when the sample count is odd)
    indices: list[int]  # original frame index of each sampled frame (before the padding)
    average_fps: float  # the stream's frame rate
    duration: float  # seconds

    @property
    def sampled_fps(self) -> float:
        """Frames sampled per second of video (LLaMA-Factory's ``fps_per_video``)."""
        return len(self.indices) / self.duration if self.duration > 0 else float(len(self.indices))

    @property
    def timestamps(self) -> list[float]:
        """Seconds of each sampled frame in the original video."""
        return [i / self.average_fps for i in self.indices]


def sample_indices(total_frames: int, duration_s: float, fps: float, maxlen: int) -> list[int]:
    """``min(total, maxlen, floor(duration x fps))`` frames (at least 1), evenly spaced from the first to the last
    frame (LLaMA-Factory's ``_get_video_sample_indices``)."""
    import numpy as np

    n = max(1, min(total_frames, maxlen, math.floor(duration_s * fps)))
    return [int(i) for i in np.linspace(0, total_frames - 1, n).astype(np.int32)]


def regularize_frame(image, max_pixels: int | None, min_pixels: int | None):
    """One frame scaled into ``min_pixels`` .. ``max_pixels`` (LLaMA-Factory's ``_preprocess_image``; a limit that is
    None, ``video_*_pixels`` unset, leaves the frame as it is), then Qwen2-VL's guards: both sides at least 28 pixels,
    aspect ratio at most 200 (``Qwen2VLPlugin._preprocess_image``)."""
    if max_pixels is not None and image.width * image.height > max_pixels:
        f = math.sqrt(max_pixels / (image.width * image.height))
        image = image.resize((int(image.width * f), int(image.height * f)))
    if min_pixels is not None and image.width * image.height < min_pixels:
        f = math.sqrt(min_pixels / (image.width * image.height))
        image = image.resize((int(image.width * f), int(image.height * f)))
    if min(image.width, image.height) < 28:
        image = image.resize((max(image.width, 28), max(image.height, 28)))
    if image.width / image.height > 200:
        image = image.resize((image.height * 180, image.height))
    if image.height / image.width > 200:
        image = image.resize((image.width, image.width * 180))
    return image.convert("RGB") if image.mode != "RGB" else image


def read_clip(
    path: str, where: str, fps: float, maxlen: int, max_pixels: int | None = None, min_pixels: int | None = None
) -> VideoClip:
    """Decode ``path`` with PyAV (the ``vision`` extra), sample and regularise its frames (module docstring)."""
    av = require_av(where, Said("part_av_videos"))
    try:
        with av.open(path) as container:
            stream = container.streams.video[0]
            if stream.duration is not None and stream.time_base is not None:
                duration = float(stream.duration * stream.time_base)
            else:
                duration = (container.duration or 0) / av.time_base
            total = stream.frames or sum(1 for _ in container.decode(stream))
            average_fps = (
                float(stream.average_rate) if stream.average_rate else (total / duration if duration else 1.0)
            )
            container.seek(0)
            wanted = sample_indices(total, duration, fps, maxlen) if total else []
            keep = set(wanted)
            decoded = {i: f.to_image() for i, f in enumerate(container.decode(stream)) if i in keep}
    except (av.error.FFmpegError, IndexError, OSError, ValueError) as exc:
        said = Said("media_video_unreadable", where=where, path=path, type=type(exc).__name__, error=str(exc)[:160])
        raise DataError(said) from None
    indices = [i for i in wanted if i in decoded]
    if not indices:
        raise DataError(Said("media_video_empty", where=where, path=path))
    frames = [regularize_frame(decoded[i], max_pixels, min_pixels) for i in indices]
    if len(frames) % 2:
        frames.append(frames[-1])
    return VideoClip(frames, indices, average_fps, duration)


@dataclasses.dataclass(frozen=True)
class VideoSpec:
    """What the model's video processor does to a clip (from its saved config, else the family's defaults)."""

    min_pixels: int
    max_pixels: int
    patch_size: int
    temporal_patch_size: int
    merge_size: int
    image_mean: tuple[float, ...]
    image_std: tuple[float, ...]
    rescale_factor: float = 1 / 255

    @classmethod
    def load(cls, folder: str, defaults: dict[str, Any]) -> VideoSpec:
        """The spec saved in ``folder`` (``video_preprocessor_config.json``, else ``preprocessor_config.json``, as
        transformers' ``BaseVideoProcessor.from_pretrained`` looks them up), missing keys from ``defaults``."""
        saved: dict[str, Any] = {}
        for name in ("video_preprocessor_config.json", "preprocessor_config.json"):
            file = Path(folder) / name
            if file.is_file():
                saved = json.loads(file.read_text(encoding="utf-8"))
                break
        size = saved.get("size") or {}
        values = {**defaults, **{k: saved[k] for k in defaults if k in saved}}
        # Qwen2-VL checkpoints write min_pixels / max_pixels (top level, or in an old-style size dict), newer ones size
        values["min_pixels"] = saved.get(
            "min_pixels", size.get("shortest_edge", size.get("min_pixels", defaults["min_pixels"]))
        )
        values["max_pixels"] = saved.get(
            "max_pixels", size.get("longest_edge", size.get("max_pixels", defaults["max_pixels"]))
        )
        values["image_mean"], values["image_std"] = tuple(values["image_mean"]), tuple(values["image_std"])
        return cls(**values)

    def tokens(self, grid: tuple[int, int, int]) -> int:
        """Tokens of a video grid: ``t * h * w / merge_size²`` (the processors' ``replace_video_token``)."""
        return grid[0] * grid[1] * grid[2] // self.merge_size**2


#: the family's resize rule: (num_frames, height, width, spec) -> (resized height, resized width)
ResizeRule = Callable[[int, int, int, VideoSpec], tuple[int, int]]


def qwen2_resize(num_frames: int, height: int, width: int, spec: VideoSpec) -> tuple[int, int]:
    """Qwen2-VL / Qwen2.5-VL: ``smart_resize`` of one frame (``Qwen2VLVideoProcessor.resize``, no per-frame cap)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    return smart_resize(
        height, width, factor=spec.patch_size * spec.merge_size, min_pixels=spec.min_pixels, max_pixels=spec.max_pixels
    )


def qwen3_resize(num_frames: int, height: int, width: int, spec: VideoSpec) -> tuple[int, int]:
    """Qwen3-VL's video ``smart_resize`` (``video_processing_qwen3_vl``): the frame count is part of the budget."""
    factor, temporal = spec.patch_size * spec.merge_size, spec.temporal_patch_size
    if num_frames < temporal:
        raise ValueError(f"t:{num_frames} must be larger than temporal_factor:{temporal}")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > 200:
        raise ValueError(
            f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}"
        )
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    t_bar = round(num_frames / temporal) * temporal
    if t_bar * h_bar * w_bar > spec.max_pixels:
        beta = math.sqrt((num_frames * height * width) / spec.max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < spec.min_pixels:
        beta = math.sqrt(spec.min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def video_grid(clip: VideoClip, spec: VideoSpec, rule: ResizeRule) -> tuple[int, int, int]:
    """``(t, h, w)`` patch grid of a clip, without touching its pixels."""
    t = len(clip.frames)
    height, width = rule(t, clip.frames[0].height, clip.frames[0].width, spec)
    return -(-t // spec.temporal_patch_size), height // spec.patch_size, width // spec.patch_size


def video_patches(frames: list, spec: VideoSpec, rule: ResizeRule):
    """``(pixel_values_videos, (t, h, w))`` of one clip, as the family's video processor computes them (module
    docstring)."""
    import numpy as np
    from PIL import Image

    t = len(frames)
    height, width = rule(t, frames[0].height, frames[0].width, spec)
    mean = np.asarray(spec.image_mean, dtype=np.float32)[:, None, None]
    std = np.asarray(spec.image_std, dtype=np.float32)[:, None, None]
    video = np.stack(
        [
            (
                np.asarray(f.resize((width, height), Image.Resampling.BICUBIC), dtype=np.float32).transpose(2, 0, 1)
                * np.float32(spec.rescale_factor)
                - mean
            )
            / std
            for f in frames
        ]
    )
    tp, p, m = spec.temporal_patch_size, spec.patch_size, spec.merge_size
    if pad := -t % tp:
        video = np.concatenate([video, np.repeat(video[-1:], pad, axis=0)])
    channel = video.shape[1]
    gt, gh, gw = video.shape[0] // tp, height // p, width // p
    patches = video.reshape(gt, tp, channel, gh // m, m, p, gw // m, m, p)
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return np.ascontiguousarray(patches.reshape(gt * gh * gw, channel * tp * p * p)), (gt, gh, gw)


def batch_videos(
    clips: list[VideoClip], spec: VideoSpec, rule: ResizeRule, seconds_per_grid: bool | None = False
) -> dict[str, Any]:
    """Model inputs of a batch's clips (in order): ``pixel_values_videos``, ``video_grid_thw`` and, for Qwen2.5-VL,
    ``second_per_grid_ts`` = ``temporal_patch_size / sampled fps`` per video (LLaMA-Factory's rule)."""
    import numpy as np
    import torch

    if not clips:
        return {}
    pieces = [video_patches(c.frames, spec, rule) for c in clips]
    out = {
        "pixel_values_videos": torch.from_numpy(np.concatenate([p for p, _ in pieces])),
        "video_grid_thw": torch.tensor([g for _, g in pieces], dtype=torch.long),
    }
    if seconds_per_grid:
        out["second_per_grid_ts"] = torch.tensor([spec.temporal_patch_size / c.sampled_fps for c in clips])
    return out
