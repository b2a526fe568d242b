"""The encoder towers that are not Qwen-VL's, for the planner: CLIP (LLaVA-1.5, LLaVA-NeXT), SigLIP (Gemma 3,
Idefics3 / SmolVLM) and Qwen2-Audio's Whisper encoder. Their block sizes are read off the transformers model (built on
the meta device, ``plan/vision.py``), and one image (its crops or tiles) or one audio becomes a number of tower
*positions*: the sequence the encoder runs on, which its activations scale with (``plan/vision_towers.py``).

- LLaVA-1.5: one crop of ``image_size``, (image_size / patch)² patches + CLS;
- LLaVA-NeXT: the anyres tiles of the best ``image_grid_pinpoints`` resolution plus the base image, each a crop;
- Gemma 3: one crop (pan-and-scan off, the processor's default), no CLS;
- Idefics3 / SmolVLM: the image processor's tiles (``get_number_of_image_patches``: rows x cols + the global image,
  or the global image alone), each (image_size / patch)² patches;
- Qwen2-Audio: every audio is padded to 30 s of mel frames (the encoder refuses any other length), so
  ``max_source_positions`` positions after the stride-2 convolution, whatever its length.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

#: plugin NAME -> (tower kind, crops rule)
ENCODERS = {
    "llava": ("clip", "one"),
    "llava_next": ("clip", "anyres"),
    "gemma3": ("siglip", "one"),
    "idefics3": ("siglip", "split"),
    "qwen2_audio": ("whisper", "audio"),
}


def encoder_dims(model, plugin, hf_config) -> dict:
    """VisionShape fields of an encoder tower (empty for a family not in :data:`ENCODERS`)."""
    import torch

    if plugin.NAME not in ENCODERS:
        return {}
    kind, rule = ENCODERS[plugin.NAME]
    vc = getattr(hf_config, "vision_config", None) or getattr(hf_config, "audio_config", None)
    tower = plugin.VISION_TOWER[0]
    blocks = next(
        m
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.ModuleList) and n.startswith(tower) and n.endswith("layers")
    )
    fc = {n.rsplit(".", 1)[-1]: m for n, m in blocks[0].named_modules() if isinstance(m, torch.nn.Linear)}
    heads = int(getattr(vc, "num_attention_heads", 0) or getattr(vc, "encoder_attention_heads", 0))
    act = str(getattr(vc, "hidden_act", None) or getattr(vc, "activation_function", "gelu"))
    dims = dict(
        tower=kind,
        hidden=fc["q_proj"].in_features,
        depth=len(blocks),
        heads=heads,
        intermediate=fc["fc1"].out_features,
        act=act if act in ("quick_gelu", "gelu_pytorch_tanh") else "gelu",
        layer_norm=True,
        crops=rule,
    )
    if kind == "whisper":
        return dict(dims, positions=int(vc.max_source_positions), in_channels=int(vc.num_mel_bins))
    grid = (int(vc.image_size) // int(vc.patch_size)) ** 2
    dims.update(
        image_size=int(vc.image_size), in_channels=int(getattr(vc, "num_channels", 3)) * int(vc.patch_size) ** 2
    )
    if (
        kind == "clip"
    ):  # every layer counts, also those above vision_feature_layer (LLaVA's -2: docs/memory-model.md 3.5)
        strategy = getattr(hf_config, "vision_feature_select_strategy", "default")
        return dict(
            dims,
            positions=grid + 1,
            feature_tokens=grid + (0 if strategy == "default" else 1),
            pinpoints=tuple(tuple(p) for p in getattr(hf_config, "image_grid_pinpoints", None) or ()),
        )
    if plugin.NAME == "gemma3":
        return dict(dims, positions=grid, feature_tokens=int(hf_config.mm_tokens_per_image))
    return dict(dims, positions=grid, feature_tokens=grid // int(hf_config.scale_factor) ** 2)


def fitted_size(height: int, width: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """``(height, width)`` after LLaMA-Factory's resize into the pixel limits (``mm_plugins.hf_processor.fit_pixels``:
    the area scaled down to ``max_pixels`` or up to ``min_pixels``), without making the image."""
    for limit, outside in (
        (max_pixels, max_pixels is not None and height * width > max_pixels),
        (min_pixels, min_pixels is not None and height * width < min_pixels),
    ):  # None: unset
        if outside:
            factor = math.sqrt(limit / (height * width))
            height, width = max(1, int(height * factor)), max(1, int(width * factor))
    return height, width


def _processor_config(folder: str | None) -> dict:
    """The image processor's saved settings (``preprocessor_config.json``, or ``processor_config.json``'s
    ``image_processor`` as transformers 5 writes it); empty without a folder (the processor's defaults apply)."""
    for name in ("preprocessor_config.json", "processor_config.json"):
        path = Path(folder) / name if folder else None
        if path is not None and path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            if "image_processor" in data or name == "preprocessor_config.json":
                return data.get("image_processor", data)
    return {}


def crops_per_image(v, height: int, width: int, folder: str | None = None) -> int:
    """How many crops/tiles the family's processor makes of one image of ``height`` x ``width`` (already fitted into
    ``image_min_pixels`` .. ``image_max_pixels``); ``folder``: the model folder whose image-processor settings
    apply."""
    if v.crops == "anyres" and v.pinpoints:
        from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

        return image_size_to_num_patches((height, width), [list(p) for p in v.pinpoints], v.image_size)
    if v.crops == "split":
        from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

        pre = _processor_config(folder)
        keys = ("size", "max_image_size", "do_image_splitting")
        proc = Idefics3ImageProcessorPil(**{k: pre[k] for k in keys if k in pre})
        return max(1, proc.get_number_of_image_patches(height, width, {})[0])
    return 1


def _llava_next_tokens(v, height: int, width: int) -> int:
    """LLaVA-NeXT's image tokens (``LlavaNextProcessor._get_number_of_features``: the base crop, the unpadded tile grid
    and one newline per row), CLS dropped with the default strategy."""
    from transformers.image_processing_utils import select_best_resolution

    side = math.isqrt(v.positions - 1)  # patches per side of a crop

    best_h, best_w = select_best_resolution([height, width], [list(p) for p in v.pinpoints])
    cur_h, cur_w = side * (best_h // v.image_size), side * (best_w // v.image_size)
    if width / height > cur_w / cur_h:
        cur_h -= 2 * ((cur_h - int(round(height * (cur_w / width), 7))) // 2)
    else:
        cur_w -= 2 * ((cur_w - int(round(width * (cur_h / height), 7))) // 2)
    return cur_h * cur_w + cur_h + v.feature_tokens


def encoder_image(v, height: int, width: int, folder: str | None = None) -> tuple[int, int]:
    """``(tower positions, LM tokens)`` of one image."""
    crops = crops_per_image(v, height, width, folder)
    if v.crops == "anyres":
        return crops * v.positions, _llava_next_tokens(v, height, width)
    if v.crops == "split":  # each tile: <fake><row_i_col_j> + its tokens; the global one <fake><global-img> .. <fake>
        return crops * v.positions, crops * (v.feature_tokens + 2) + 1
    return v.positions, v.feature_tokens


def positions_from_tokens(v, tokens: int, items: int) -> int:
    """Tower positions of a measured sample from its media tokens (``data/lengths.py`` counts them in the ids) and its
    number of media: exact for one crop per image, for audio and for Idefics3's tiles (up to its markers' rounding);
    LLaVA-NeXT's at most (:func:`_anyres_crops`)."""
    if not tokens:
        return 0
    items = max(1, items)
    if v.crops == "audio":
        return items * v.positions
    if v.crops == "split":
        return max(items, round((tokens - items) / (v.feature_tokens + 2))) * v.positions
    if v.crops == "anyres":
        return items * _anyres_crops(v, tokens / items) * v.positions
    return max(items, tokens // v.feature_tokens) * v.positions


def _anyres_crops(v, tokens: float) -> int:
    """Crops (base + tiles) of one measured LLaVA-NeXT image: the most tiles any ``image_grid_pinpoints`` resolution
    gives whose grid holds ``tokens``. Unpadding hides the grid in the token count (a 4-tile image can have fewer
    tokens than a full 2-tile one), so this is an upper bound, off by one or two tiles for elongated images."""
    side = math.isqrt(v.positions - 1)
    grids = [(h // v.image_size) * (w // v.image_size) for h, w in v.pinpoints] or [0]
    fits = [g for g in grids if v.feature_tokens + g * side * side + g * side >= tokens]
    return 1 + max(fits or grids)
