"""The vision (or audio) side of a multimodal model for the planner: parameters, media tokens, activations.

A :class:`VisionShape` is read off the real transformers model built on the ``meta`` device, split into the
parts the family plugin declares (``tunekit.data.mm_plugins``: ``VISION_TOWER``, ``PROJECTOR``), so weights
and trainable counts are exact. Which parameters train mirrors ``tunekit.model.trainable``:

- full: every parameter of an unfrozen part (``freeze_vision_tower`` / ``freeze_multi_modal_projector``);
- LoRA ``lora_target: all``: adapters on the ``nn.Linear`` layers of the unfrozen parts (the LM head never);
  an explicit ``lora_target`` list reaches every Linear of that name, the vision ones included (PEFT matches
  the last name component);
- freeze: the language model's last ``freeze_trainable_layers`` layers, plus every parameter of an unfrozen part.

Media tokens: Qwen-VL families resize each image with the processor's ``smart_resize`` (factor = patch x merge)
into ``image_min_pixels`` .. ``image_max_pixels``; a patch is ``patch_size``² pixels, a token ``merge_size``²
patches. Activations of the tower are counted per patch (docs/memory-model.md, "Vision tower"). The other families'
encoders (CLIP, SigLIP, Whisper: ``plan/vision_encoders.py``) count per tower *position*: their media's "patches" are
the positions their crops, tiles or audios put through the encoder.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass

from ..config.problems import Said
from ..config.schema import Config
from ..data.mm_plugins import FAMILIES
from ..data.mm_plugins.settings import used_settings
from ..data.mm_plugins.video import VideoSpec, qwen2_resize, qwen3_resize, regularize_frame
from ..errors import ConfigError
from .notes import Note
from .vision_encoders import encoder_dims, encoder_image, fitted_size, positions_from_tokens

PARTS = ("tower", "projector")
#: bytes per patch x c kept by the MLP activation (its input and what the next Linear reads, see the docs)
ACT_SAVED = {"gated": 4, "quick_gelu": 3, "gelu_pytorch_tanh": 2, "gelu": 2}


@dataclass(frozen=True)
class VisionShape:
    family: str  # the plugin's NAME (qwen2_vl, qwen3_vl, llava, ...)
    model_type: str
    params: tuple[tuple[str, str, int], ...]  # (part, full parameter name, numel)
    linears: tuple[tuple[str, str, int, int], ...]  # (part, full module name, in_features, out_features)
    convs: tuple[
        tuple[str, str, int, int], ...
    ] = ()  # patch convolutions (part, name, in x kernel, out): PEFT adapts a
    # Conv named in an explicit lora_target (Qwen-VL's patch_embed.proj for "proj"), lora_target all does not
    hidden: int = 0  # width of the tower blocks
    depth: int = 0
    heads: int = 0
    intermediate: int = 0
    act: str = "gated"  # MLP kind (ACT_SAVED)
    layer_norm: bool = False  # LayerNorm (mean + rstd) instead of RMSNorm
    patch_size: int = 0  # 0: not a patch-grid family (fixed tokens per image)
    temporal_patch: int = 1
    merge: int = 1
    in_channels: int = 3
    fixed_tokens: int = 0  # tokens per image of a fixed-grid family (LLaVA, Gemma 3)
    media: tuple[str, ...] = ("images",)  # the kinds the family trains on (its plugin's MEDIA)
    tower: str = ""  # an encoder tower (plan/vision_encoders.py): clip | siglip | whisper; "" for Qwen-VL's
    crops: str = ""  # how an image becomes crops: one | anyres (LLaVA-NeXT) | split (Idefics3 tiles) | audio
    positions: int = 0  # encoder positions per crop / tile / audio
    feature_tokens: int = 0  # LM tokens one crop (tile) gives
    image_size: int = 0  # the encoder's crop side in pixels
    pinpoints: tuple[tuple[int, int], ...] = ()  # LLaVA-NeXT's image_grid_pinpoints

    def part_params(self, part: str) -> int:
        return sum(k for p, _, k in self.params if p == part)

    @property
    def total_params(self) -> int:
        return sum(k for _, _, k in self.params)

    def to_dict(self) -> dict:
        return {
            "family": self.family,
            "tower_params": self.part_params("tower"),
            "projector_params": self.part_params("projector"),
            "depth": self.depth,
            "hidden_size": self.hidden,
            "patch_size": self.patch_size,
            "merge_size": self.merge,
        }


def plugin_for(model_type: str):
    """The family plugin class serving ``model_type``, or None."""
    for module in dict.fromkeys(FAMILIES.values()):
        cls = importlib.import_module(f"tunekit.data.mm_plugins.{module}").PLUGIN
        if model_type in cls.MODEL_TYPES:
            return cls
    return None


def _in(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _part_of(name: str, plugin) -> str | None:
    if _in(name, plugin.VISION_TOWER):
        return "tower"
    if _in(name, plugin.PROJECTOR):
        return "projector"
    return None


def vision_shape_from_model(model, plugin) -> VisionShape:
    """Read the vision parts of a (meta or real) VLM; parameters outside every declared part count with the tower."""
    import torch

    lm = plugin.LANGUAGE_MODEL + (("lm_head",) if "lm_head" not in plugin.LANGUAGE_MODEL else ())
    params, linears = [], []
    seen: set[int] = set()
    for n, p in model.named_parameters(remove_duplicate=True):
        if id(p) in seen or _in(n, lm) or "lora_" in n:
            continue
        seen.add(id(p))
        params.append((_part_of(n, plugin) or "tower", n.replace(".base_layer", ""), p.numel()))
    convs = []
    for n, m in model.named_modules():
        if _in(n, lm) or "lora_" in n:
            continue
        entry = (_part_of(n, plugin) or "tower", n.replace(".base_layer", ""))
        if isinstance(m, torch.nn.Linear):
            linears.append((*entry, m.in_features, m.out_features))
        elif isinstance(m, (torch.nn.Conv2d, torch.nn.Conv3d)):
            convs.append((*entry, m.in_channels // m.groups * math.prod(m.kernel_size), m.out_channels))
    cfg = model.config
    vc = getattr(cfg, "vision_config", None) or getattr(cfg, "audio_config", None)

    dims = _tower_dims(model, plugin, vc) or encoder_dims(model, plugin, cfg)
    fixed = int(getattr(cfg, "mm_tokens_per_image", 0) or getattr(cfg, "image_seq_length", 0) or 0)
    return VisionShape(
        family=plugin.NAME,
        model_type=str(cfg.model_type),
        params=tuple(params),
        linears=tuple(linears),
        convs=tuple(convs),
        media=tuple(plugin.MEDIA),
        fixed_tokens=fixed if not dims.get("patch_size") else 0,
        **dims,
    )


def _tower_dims(model, plugin, vc) -> dict:
    """Block sizes of a Qwen-VL style tower (patch grid + merger); other families get only the parameter split."""
    import torch

    if plugin.NAME not in ("qwen2_vl", "qwen3_vl") or vc is None:
        return {}
    blocks = next(
        m for n, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and n.endswith("visual.blocks")
    )
    block = blocks[0]
    mlp = [m for n, m in block.named_modules() if isinstance(m, torch.nn.Linear) and n.startswith("mlp.")]
    act = "gated" if len(mlp) == 3 else str(getattr(vc, "hidden_act", "gelu"))
    hidden = block.attn.qkv.in_features
    return dict(
        hidden=hidden,
        depth=len(blocks),
        heads=int(vc.num_heads),
        intermediate=max(m.out_features for m in mlp),
        act=act if act in ACT_SAVED else "gelu",
        layer_norm=isinstance(block.norm1, torch.nn.LayerNorm),
        patch_size=int(vc.patch_size),
        temporal_patch=int(vc.temporal_patch_size),
        merge=int(vc.spatial_merge_size),
        in_channels=int(getattr(vc, "in_channels", getattr(vc, "in_chans", 3))),
    )


# ------------------------------------------------------------------------------------------------- media tokens
def image_grid(
    v: VisionShape, height: int, width: int, min_pixels: int, max_pixels: int, folder: str | None = None
) -> tuple[int, int]:
    """``(patches, tokens)`` of one image of ``height`` x ``width`` pixels, as the family's image processor makes them
    (an encoder family: tower positions of its crops / tiles, after LLaMA-Factory's resize into the pixel limits)."""
    if v.tower:
        return encoder_image(v, *fitted_size(height, width, min_pixels, max_pixels), folder)
    if not v.patch_size:
        return v.fixed_tokens, v.fixed_tokens
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    h, w = smart_resize(height, width, factor=v.patch_size * v.merge, min_pixels=min_pixels, max_pixels=max_pixels)
    patches = (h // v.patch_size) * (w // v.patch_size)
    return patches, patches // v.merge**2


def video_grid(
    v: VisionShape, frames: int, height: int, width: int, max_pixels: int, min_pixels: int, folder: str | None = None
) -> tuple[int, int]:
    """``(patches, tokens)`` of a clip of ``frames`` sampled frames of ``height`` x ``width``: each frame regularised
    into ``video_min_pixels`` .. ``video_max_pixels`` (``mm_plugins.video.regularize_frame``), an odd count padded,
    then the family's video resize with the video processor saved in ``folder`` (else the family's defaults)."""
    if not v.patch_size:
        raise ConfigError(Said("plan_no_video", family=v.family))
    from PIL import Image

    plugin = plugin_for(v.model_type)
    spec = VideoSpec.load(folder, plugin.VIDEO_DEFAULTS) if folder else VideoSpec(**plugin.VIDEO_DEFAULTS)
    frame = regularize_frame(Image.new("RGB", (width, height)), max_pixels, min_pixels)
    frames += frames % 2  # an odd count gets its last frame repeated (mm_plugins.video.read_clip)
    rule = qwen3_resize if v.family == "qwen3_vl" else qwen2_resize
    h, w = rule(frames, frame.height, frame.width, spec)
    patches = -(-frames // spec.temporal_patch_size) * (h // spec.patch_size) * (w // spec.patch_size)
    return patches, patches // spec.merge_size**2


@dataclass(frozen=True)
class Media:
    """What one sample carries, for the plan: images and videos and the tokens/patches they become."""

    images: int = 0
    image_tokens: int = 0  # per image
    image_patches: int = 0
    videos: int = 0
    video_tokens: int = 0  # per video
    video_patches: int = 0
    source: str = ""  # how the numbers were obtained
    audios: int = 0
    audio_tokens: int = 0  # per audio
    audio_patches: int = 0  # encoder positions per audio

    @property
    def tokens(self) -> int:
        return self.images * self.image_tokens + self.videos * self.video_tokens + self.audios * self.audio_tokens

    @property
    def patches(self) -> int:
        return self.images * self.image_patches + self.videos * self.video_patches + self.audios * self.audio_patches


def assumed_media(
    v: VisionShape,
    cfg: Config,
    images: int | None,
    image_size: tuple[int, int] | None,
    videos: int | None,
    video_seconds: float | None = None,
) -> Media:
    """Media per sample when the data is not measured: ``images`` images of ``image_size`` (default: a square of
    ``image_max_pixels``), ``videos`` clips of ``video_seconds`` (``video_fps`` frames a second up to ``video_maxlen``;
    default: ``video_maxlen`` frames) of square frames at ``video_max_pixels``."""
    from pathlib import Path

    folder = cfg.model_name_or_path if cfg.model_name_or_path and Path(cfg.model_name_or_path).is_dir() else None
    if v.crops == "audio":  # one audio per sample, padded to 30 s by the processor: the longest one's tokens
        return Media(
            audios=1,
            audio_tokens=v.positions // 2,
            audio_patches=v.positions,
            source="assumed per sample: 1 audio of 30 s (the encoder's padded length)",
        )
    if not v.patch_size and not v.fixed_tokens and not v.tower:
        return Media(source=f"{v.family}: media tokens not assumed without data (measure the data for them)")

    used = used_settings(cfg, folder, qwen=bool(v.patch_size and not v.tower))  # the folder's, unless options are set
    n_img = 1 if images is None else images
    if image_size is None:  # unset image_max_pixels without the processor's own limit: LLaMA-Factory's 768²
        side = int(math.isqrt(used["image_max_pixels"] or 768 * 768))
        image_size = (side, side)
    grid = (image_size[0], image_size[1], used["image_min_pixels"], used["image_max_pixels"])
    ip, it = image_grid(v, *grid, folder) if n_img else (0, 0)
    n_vid = videos or 0
    maxlen = used["video_maxlen"]
    frames = maxlen if video_seconds is None else max(1, min(maxlen, math.floor(video_seconds * used["video_fps"])))
    side = int(math.isqrt(used["video_max_pixels"] or 256 * 256))  # unset: frames assumed 256x256
    vp, vt = (
        video_grid(v, frames, side, side, used["video_max_pixels"], used["video_min_pixels"], folder)
        if n_vid
        else (0, 0)
    )
    what = f"{n_img} image(s) of {image_size[1]}x{image_size[0]}" + (
        f", {n_vid} video(s) of {frames} frames" if n_vid else ""
    )
    return Media(n_img, it, ip, n_vid, vt, vp, source=f"assumed per sample: {what}")


def measured_media(v: VisionShape, lengths) -> Media | None:
    """The sample with the most media tokens in the measured data (``data/lengths.py`` columns), or None."""
    if lengths is None or "image_tokens" not in (
        lengths.column_names if hasattr(lengths, "column_names") else lengths
    ):
        return None
    import numpy as np

    img, vid = (np.asarray(lengths[c], dtype=np.int64) for c in ("image_tokens", "video_tokens"))
    if not len(img):
        return None
    if v.tower:
        return _measured_encoder_media(v, lengths)
    i = int(np.argmax(img + vid))
    m2 = v.merge**2 if v.patch_size else 1
    return Media(
        1 if img[i] else 0,
        int(img[i]),
        int(img[i]) * m2,
        1 if vid[i] else 0,
        int(vid[i]),
        int(vid[i]) * m2,
        source=f"measured: the sample with the most media tokens ({lengths['source'][i]})",
    )


def _measured_encoder_media(v: VisionShape, lengths) -> Media:
    """An encoder family's sample with the most media tokens: its encoder positions from its tokens and media count."""
    import numpy as np

    kind = "audio" if v.crops == "audio" else "image"
    cols = lengths.column_names if hasattr(lengths, "column_names") else lengths
    tokens = np.asarray(
        lengths[f"{kind}_tokens"] if f"{kind}_tokens" in cols else lengths["image_tokens"], dtype=np.int64
    )
    count = np.asarray(lengths[f"{kind}s"], dtype=np.int64) if f"{kind}s" in cols else (tokens > 0).astype(np.int64)
    i = int(np.argmax(tokens))
    n, t = int(count[i]) or (1 if tokens[i] else 0), int(tokens[i])
    per = positions_from_tokens(v, t, n) // max(1, n)
    source = f"measured: the sample with the most media tokens ({lengths['source'][i]})"
    if kind == "audio":
        return Media(audios=n, audio_tokens=t // max(1, n), audio_patches=per, source=source)
    return Media(images=n, image_tokens=t // max(1, n), image_patches=per, source=source)


def media_section(v: VisionShape, cfg: Config, media: Media, micro_batch: int) -> tuple[dict, list[Note]]:
    """The plan's ``media`` entry and its notes."""
    notes = []
    if media.tokens > cfg.cutoff_len:
        notes.append(Note("note_media_cut", tokens=media.tokens, cutoff=cfg.cutoff_len))
    entry = {
        "source": media.source,
        "images_per_sample": media.images,
        "tokens_per_image": media.image_tokens,
        "patches_per_image": media.image_patches,
        "videos_per_sample": media.videos,
        "tokens_per_video": media.video_tokens,
        "patches_per_video": media.video_patches,
        "media_tokens_per_sample": media.tokens,
        **(
            {
                "audios_per_sample": media.audios,
                "tokens_per_audio": media.audio_tokens,
                "patches_per_audio": media.audio_patches,
            }
            if media.audios
            else {}
        ),
        "patches_per_micro_batch": micro_batch * media.patches,
    }
    return entry, notes
