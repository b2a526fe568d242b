"""The media settings a run uses: the model folder's processor settings, unless the config sets an option.

Every media option (``image_min_pixels``, ``image_max_pixels``, ``video_min_pixels``, ``video_max_pixels``,
``video_fps``, ``video_maxlen``, ``audio_sampling_rate``) defaults to None, meaning "the model folder's": what its
processor does at inference (``AutoProcessor.from_pretrained(folder)``), so training sees the image / video / audio
tokens inference sees. The folder's values, per option:

- ``image_min_pixels`` / ``image_max_pixels``: Qwen-VL's image processor ``size`` (``shortest_edge`` /
  ``longest_edge``, the old ``min_pixels`` / ``max_pixels``); the other families have no such limit (their
  processor resizes by its own rule), so None: images go to the processor as they are;
- ``video_min_pixels`` / ``video_max_pixels``: None (no per-frame scaling before the video processor, whose own
  ``size`` limits always apply, :class:`~tunekit.data.mm_plugins.video.VideoSpec`);
- ``video_fps`` / ``video_maxlen``: the video processor's saved ``fps`` / ``max_frames`` (else its class's: 2 / 768);
- ``audio_sampling_rate``: the feature extractor's ``sampling_rate``.

A value set in the config is used instead; where it differs from the folder's the run says so once (a warning naming
the option, both values and the folder), and ``tunekit_config.yaml`` records it (an option left unset is recorded as
null: the folder's value again when the file is reused). An option a config leaves unset but that the run of one of
its adapters set (recorded in the adapter's ``tunekit_config.yaml``) is that run's value, so ``tunekit chat`` / ``api``
/ ``predict`` with the adapter expand media as its training did; ``tunekit export`` writes the values into the
exported folder's processor files (``export.media``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ...config.problems import Said
from ...config.schema import Config
from ...errors import ConfigError

logger = logging.getLogger(__name__)

MEDIA_OPTIONS = (
    "image_min_pixels",
    "image_max_pixels",
    "video_min_pixels",
    "video_max_pixels",
    "video_fps",
    "video_maxlen",
    "audio_sampling_rate",
)
#: the video processors' class defaults of ``fps`` / ``max_frames`` (Qwen2VLVideoProcessor, Qwen3VLVideoProcessor)
VIDEO_FPS, VIDEO_MAX_FRAMES = 2.0, 768
_said: set[tuple] = set()  # overrides already reported in this process


def _shown(value: Any) -> str:
    return "none" if value is None else str(value)


def recorded_options(folders: list[str]) -> dict[str, Any]:
    """The media options set (not null) in the ``tunekit_config.yaml`` of the run folders ``folders`` (or of their
    parents, for a ``checkpoint-N``), the first folder's first."""
    import yaml

    found: dict[str, Any] = {}
    for folder in folders:
        root = Path(folder or "").expanduser()
        for path in (root / "tunekit_config.yaml", root.parent / "tunekit_config.yaml"):
            if folder and path.is_file():
                try:
                    saved = yaml.safe_load(path.read_text(encoding="utf-8"))
                except (OSError, yaml.YAMLError):
                    continue
                if isinstance(saved, dict):
                    found.update({k: saved[k] for k in MEDIA_OPTIONS if saved.get(k) is not None and k not in found})
                break
    return found


def set_options(cfg: Config, model_folder: bool = False) -> dict[str, Any]:
    """The media options set for ``cfg``'s model: the config's, else its adapters' runs' (the last adapter first),
    with ``model_folder`` also the model folder's own run (a full fine-tuning output, for export)."""
    folders = [*reversed(getattr(cfg, "adapter_paths", None) or [])]
    folders += [cfg.model_name_or_path] if model_folder and cfg.model_name_or_path else []
    own = {k: getattr(cfg, k) for k in MEDIA_OPTIONS if getattr(cfg, k, None) is not None}
    return {**recorded_options(folders), **own}


def choose(cfg: Config, option: str, folder_value: Any, path: str, what: str) -> Any:
    """The value of ``option`` the run uses: the one set for it (:func:`set_options`), else ``folder_value``
    (``what``: the folder's setting, for the notice). An override is reported once per process."""
    own = getattr(cfg, option, None)
    value = own if own is not None else set_options(cfg).get(option)
    if value is None:
        return folder_value
    if value != folder_value:
        key = (option, value, folder_value, str(path))
        if key not in _said:
            _said.add(key)
            fix = (
                f"unset {option} to use the processor's"
                if own is not None
                else f"as the adapter was trained (its tunekit_config.yaml); set {option} to change it"
            )
            logger.warning(
                "%s: %s is used instead of the model processor's %s (%s in %s); %s.",
                option,
                value,
                what,
                _shown(folder_value),
                path,
                fix,
            )
    return value


def image_limits(cfg: Config, size: dict, path: str) -> dict[str, int]:
    """Qwen-VL's image ``size`` (``shortest_edge`` / ``longest_edge``) with the options applied; a minimum above the
    maximum (one set, the other the folder's) is a ConfigError naming both."""
    low = choose(cfg, "image_min_pixels", size.get("shortest_edge", size.get("min_pixels")), path, "min_pixels")
    high = choose(cfg, "image_max_pixels", size.get("longest_edge", size.get("max_pixels")), path, "max_pixels")
    if low is not None and high is not None and low > high:
        raise ConfigError(Said("mm_pixel_limits", low=low, high=high, path=path))
    return {"shortest_edge": low, "longest_edge": high}


def saved_video_config(folder: str | None) -> dict[str, Any]:
    """The saved video processor settings of ``folder`` (``video_preprocessor_config.json``, else
    ``preprocessor_config.json``, as transformers looks them up); empty without one."""
    for name in ("video_preprocessor_config.json", "preprocessor_config.json"):
        file = Path(folder) / name if folder else None
        if file is not None and file.is_file():
            return json.loads(file.read_text(encoding="utf-8"))
    return {}


def video_options(cfg: Config, path: str) -> dict[str, Any]:
    """``read_clip``'s keyword arguments: fps and frame limit (the folder's video processor, else the class's) and the
    per-frame pixel limits (none unless set)."""
    saved = saved_video_config(path)
    return dict(
        fps=choose(cfg, "video_fps", float(saved.get("fps") or VIDEO_FPS), path, "fps"),
        maxlen=choose(cfg, "video_maxlen", int(saved.get("max_frames") or VIDEO_MAX_FRAMES), path, "max_frames"),
        max_pixels=choose(cfg, "video_max_pixels", None, path, "per-frame limit"),
        min_pixels=choose(cfg, "video_min_pixels", None, path, "per-frame limit"),
    )


def used_settings(cfg: Config, folder: str | None, qwen: bool) -> dict[str, Any]:
    """The image and video options as a run on ``folder`` uses them (for ``tunekit plan``, which loads no processor):
    ``qwen``: the family has Qwen-VL's image pixel limits (else the image limits are the options, None when unset)."""
    given = set_options(cfg)
    out: dict[str, Any] = {k: given.get(k) for k in MEDIA_OPTIONS}
    if qwen:
        size: dict = {}
        file = Path(folder) / "preprocessor_config.json" if folder else None
        if file is not None and file.is_file():
            data = json.loads(file.read_text(encoding="utf-8"))
            size = dict(data.get("size") or {})
            size.update(
                {
                    ("shortest_edge" if k == "min_pixels" else "longest_edge"): data[k]
                    for k in ("min_pixels", "max_pixels")
                    if k in data
                }
            )
        if not size:  # Qwen2VLImageProcessorPil's class default
            size = {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 1280}
        limits = image_limits(cfg, size, str(folder))
        out["image_min_pixels"], out["image_max_pixels"] = limits["shortest_edge"], limits["longest_edge"]
    out.update({f"video_{k}": v for k, v in video_options(cfg, folder).items() if k in ("fps", "maxlen")})
    return out
