"""Qwen3-VL (``Qwen3VLForConditionalGeneration``): templates ``qwen3_vl`` (reasoning) and ``qwen3_vl_nothink``.

Images as Qwen2-VL (``<|vision_start|>`` + n × ``<|image_pad|>`` + ``<|vision_end|>``, n = grid / ``merge_size²``
from the model's image processor: ``Qwen2VLImageProcessorPil`` with 16-pixel patches). A ``<video>`` becomes one
block per temporal patch, each preceded by its time stamp (Qwen's ``Qwen3VLProcessor`` rule, as in
qwen-vl-utils, vLLM and LLaMA-Factory): ``<{t:.1f} seconds><|vision_start|>`` + (h·w / ``merge_size²``) ×
``<|video_pad|>`` + ``<|vision_end|>``, where t is the mean time of the frames of that temporal patch
(``Qwen3VLProcessor._calculate_timestamps``). The whole ``<|vision_start|><|video_pad|><|vision_end|>`` of the
chat template is replaced by these blocks. The grid comes from Qwen3-VL's video ``smart_resize``, whose pixel
budget counts every frame (``mm_plugins.video.qwen3_resize``). No ``second_per_grid_ts``: Qwen3-VL's M-RoPE
splits a video into one grid per temporal patch (``get_rope_index``), the time stamps carry the time.

Modules (LLaMA-Factory's ``qwen3_vl`` keys): vision tower ``model.visual.patch_embed`` + ``pos_embed`` + ``blocks`` +
``deepstack_merger_list``, projector ``model.visual.merger``, language model ``model.language_model`` + ``lm_head``.
"""

from __future__ import annotations

from .qwen2_vl import VIDEO_PAD, VISION_END, VISION_START, Qwen2VLPlugin
from .video import VideoClip, qwen3_resize, video_grid

#: ``Qwen3VLVideoProcessor``'s class defaults (a folder's saved video processor config overrides them)
VIDEO_DEFAULTS = dict(
    min_pixels=128 * 32 * 32,
    max_pixels=32 * 32 * 768,
    patch_size=16,
    temporal_patch_size=2,
    merge_size=2,
    image_mean=(0.5, 0.5, 0.5),
    image_std=(0.5, 0.5, 0.5),
    rescale_factor=1 / 255,
)


def frame_timestamps(clip: VideoClip, temporal_patch_size: int) -> list[float]:
    """Seconds of each temporal patch: the mean of its first and last frame's time (the sampled frames' original
    indices / the stream's fps, padded by repeating the last; ``Qwen3VLProcessor._calculate_timestamps``)."""
    times = clip.timestamps
    times += [times[-1]] * (-len(times) % temporal_patch_size)
    return [(times[i] + times[i + temporal_patch_size - 1]) / 2 for i in range(0, len(times), temporal_patch_size)]


class Qwen3VLPlugin(Qwen2VLPlugin):
    NAME = "qwen3_vl"
    TEMPLATES = ("qwen3_vl", "qwen3_vl_nothink")
    MODEL_TYPES = ("qwen3_vl",)
    VISION_TOWER = (
        "model.visual.patch_embed",
        "model.visual.pos_embed",
        "model.visual.blocks",
        "model.visual.deepstack_merger_list",
    )
    PROJECTOR = ("model.visual.merger",)
    LANGUAGE_MODEL = ("model.language_model", "lm_head")
    MEDIA = ("images", "videos")
    VIDEO_DEFAULTS = VIDEO_DEFAULTS
    resize_rule = staticmethod(qwen3_resize)

    def video_text(self, clip: VideoClip) -> str:
        spec = self.video_spec
        t, h, w = video_grid(clip, spec, self.resize_rule)
        frame = VISION_START + VIDEO_PAD * (h * w // spec.merge_size**2) + VISION_END
        return "".join(f"<{s:.1f} seconds>" + frame for s in frame_timestamps(clip, spec.temporal_patch_size)[:t])


PLUGIN = Qwen3VLPlugin
