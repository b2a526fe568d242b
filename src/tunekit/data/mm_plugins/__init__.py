"""Multimodal model families: one small module per family, found by template name.

A family module defines a :class:`MediaPlugin` subclass that says, for its model family,

- which templates and ``model_type`` values it serves (``TEMPLATES``, ``MODEL_TYPES``);
- which processor settings the media options override (``image_max_pixels`` → Qwen-VL's image processor size
  limits ...); an option left unset (None) is the model folder's own setting (``settings``);
- how each ``<image>`` / ``<video>`` / ``<audio>`` placeholder expands into the model's own media tokens.
  The number of tokens comes from the model's own image processor with the folder's settings (unless an option
  overrides one), so a training sample's ids equal what the processor gives the same conversation at inference;
- which modules are the vision tower, the projector and the language model (``VISION_TOWER``,
  ``PROJECTOR``, ``LANGUAGE_MODEL``: prefixes of ``named_modules()`` names, read by
  ``tunekit.model.multimodal`` for the freeze options and LoRA targets; plain strings, so the data layer
  does not import the model layer);
- how a batch's media become model inputs (``collate``).

Adding a family = one module here + its entry in :data:`FAMILIES` (+ its template in the registry).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, ClassVar

from ...config.problems import Said
from ...config.schema import Config
from ...errors import ConfigError, DataError
from ..dataset_info import outside_data_roots

#: template name -> family module (under tunekit.data.mm_plugins)
FAMILIES = {
    "qwen2_vl": "qwen2_vl",
    "qwen3_vl": "qwen3_vl",
    "qwen3_vl_nothink": "qwen3_vl",
    "qwen2_audio": "qwen2_audio",
}
FAMILIES.update(
    {
        "llava": "llava",
        "llava_next": "llava_next",
        "llava_next_mistral": "llava_next",
        "llava_next_llama3": "llava_next",
        "gemma3": "gemma3",
    }
)
FAMILIES.update({"smolvlm": "idefics3", "idefics3": "idefics3"})
PLACEHOLDERS = {"images": "<image>", "videos": "<video>", "audios": "<audio>"}


class MediaPlugin:
    """What every family provides (see the module docstring). Instances are picklable (``datasets.map``)."""

    NAME: ClassVar[str] = ""
    TEMPLATES: ClassVar[tuple[str, ...]] = ()
    MODEL_TYPES: ClassVar[tuple[str, ...]] = ()
    VISION_TOWER: ClassVar[tuple[str, ...]] = ()
    PROJECTOR: ClassVar[tuple[str, ...]] = ()
    LANGUAGE_MODEL: ClassVar[tuple[str, ...]] = ()
    MEDIA: ClassVar[tuple[str, ...]] = ("images",)  # kinds this family can train on
    AUDIO_IN_VIDEO: ClassVar[bool] = False  # whether the family reads a video's audio track (use_audio_in_video)

    def image_token_counts(self, paths: list[str], where: str) -> list[int]:
        """How many tokens each image becomes (from the family's processor at the configured resolution)."""
        raise NotImplementedError

    def expand(self, text: str, counts: list[int], start: int) -> tuple[str, int]:
        """``text`` with its placeholders expanded, the k-th with ``counts[start + k]`` tokens; (text, next index)."""
        raise NotImplementedError

    def media_token_ids(self) -> set[int]:
        """Ids that stand for media: never trained (labels -100)."""
        raise NotImplementedError

    def collate(self, paths: list[str], input_ids) -> dict[str, Any]:
        """The model's media inputs for one batch (images in order of appearance), given its padded ``input_ids``."""
        raise NotImplementedError


def model_type_of(path: str) -> tuple[str | None, bool]:
    """``(model_type, has a vision/audio part)`` of the model at ``path`` (a local folder), or ``(None, False)``."""
    import json

    cfg_file = Path(path) / "config.json"
    if not cfg_file.is_file():
        return None, False
    try:
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, False
    return cfg.get("model_type"), any(k in cfg for k in ("vision_config", "audio_config", "vision_tower"))


def from_preprocessor_config(loader, path: str, what: Said, family: str):
    """``loader.from_pretrained(path)``; a folder without the family's ``what`` is a DataError naming it."""
    try:
        return loader.from_pretrained(path)
    except OSError as exc:
        said = Said("mm_no_preprocessor", path=path, what=what, family=family, error=str(exc)[:200])
        raise DataError(said) from None


def special_token_ids(path: str, tokens: tuple[str, ...], family: str) -> dict[str, int]:
    """The ids of the family's media ``tokens`` in the tokenizer at ``path``; a DataError names any it lacks."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in tokens}
    missing = [t for t, i in ids.items() if i is None or i == tokenizer.unk_token_id]
    if missing:
        raise DataError(Said("mm_tokenizer_lacks", path=path, family=family, tokens=", ".join(missing)))
    return ids


def load_plugin(cfg: Config, template_name: str | None) -> MediaPlugin | None:
    """The family plugin for ``template_name`` loaded for ``cfg``'s model, or None for a text-only template.

    A vision-language model with a text-only template, or a multimodal template with a text-only model,
    is a :class:`ConfigError` naming the fix.
    """
    path = cfg.model_name_or_path
    model_type, multimodal_model = model_type_of(path) if path else (None, False)
    module = FAMILIES.get(template_name or "")
    if module is None:
        if multimodal_model:
            serving = [
                t
                for t, m in FAMILIES.items()
                if model_type in importlib.import_module(f"{__name__}.{m}").PLUGIN.MODEL_TYPES
            ]
            known = ", ".join(sorted(serving or FAMILIES))  # the templates of this model_type, else every one
            said = Said(
                "mm_text_only_template",
                template=str(template_name),
                path=path,
                model_type=str(model_type),
                known=known,
            )
            raise ConfigError(said)
        return None
    plugin_cls = importlib.import_module(f"{__name__}.{module}").PLUGIN
    if model_type is not None and model_type not in plugin_cls.MODEL_TYPES:
        types = ", ".join(plugin_cls.MODEL_TYPES)
        said = Said("mm_template_other_model", template=template_name, types=types, path=path, model_type=model_type)
        raise ConfigError(said)
    if getattr(cfg, "use_audio_in_video", False) and not plugin_cls.AUDIO_IN_VIDEO:
        raise ConfigError(Said("mm_no_audio_in_video", family=plugin_cls.NAME))
    return plugin_cls.load(cfg, path)


def media_root(cfg: Config) -> Path:
    """Where relative media paths are resolved: ``media_dir``, else ``dataset_dir`` (as LLaMA-Factory)."""
    return Path(cfg.media_dir or cfg.dataset_dir)


def resolve_media(paths: list[Any], kind: str, root: Path, where: str) -> list[str]:
    """Absolute, existing paths of a record's media list; a missing file names the file and the record."""
    out = []
    for j, value in enumerate(paths):
        if not isinstance(value, str) or not value:
            raise DataError(Said("media_not_path", where=where, kind=kind, index=j, value=repr(str(value)[:80])))
        if value.startswith(("http://", "https://", "data:")):
            raise DataError(Said("media_url", where=where, kind=kind, index=j, url=value[:80]))
        p = Path(value).expanduser()
        full = p if p.is_absolute() else root / p
        if not full.is_file():
            raise DataError(Said("media_not_found", where=where, kind=kind, index=j, value=value, full=str(full)))
        roots = outside_data_roots(full)
        if roots is not None:  # a job of the web board: media as confined as the data files that name them
            roots = tuple(map(str, roots))
            raise DataError(Said("media_outside_roots", where=where, kind=kind, index=j, value=value, roots=roots))
        out.append(str(full.resolve()))
    return out


def require_av(where: str, what: Said):
    """PyAV (the ``vision`` extra), which decodes videos and audio; without it a DataError says how to install it."""
    try:
        import av
    except ImportError:
        raise DataError(Said("media_needs_av", where=where, what=what)) from None
    return av


def open_image(path: str, where: str):
    """The image at ``path`` as RGB (fully decoded, so a truncated file fails here, naming file and record)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            img.load()
            return img.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        said = Said("media_image_unreadable", where=where, path=path, type=type(exc).__name__, error=str(exc)[:160])
        raise DataError(said) from None
