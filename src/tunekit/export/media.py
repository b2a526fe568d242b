"""Exporting vision-language and audio-language models: the processor files and the official chat template.

A multimodal model (``vision_config`` / ``audio_config`` in its config) is loaded, merged and saved as the whole
class training loaded (``tunekit.model.multimodal.model_class``: ``AutoModelForImageTextToText``, or
``AutoModelForMultimodalLM`` for Qwen2-Audio), so the folder holds the vision/audio tower and projector next to
the language model. What plain ``AutoProcessor.from_pretrained(export)`` needs besides the tokenizer comes from
the model's own folder, unchanged:

- the processor files that folder has of :data:`PROCESSOR_FILES` (``preprocessor_config.json``: the image
  processor or audio feature extractor; ``video_preprocessor_config.json`` for Qwen2-VL/Qwen3-VL video;
  ``processor_config.json``: the processor class and its settings, LLaVA's image processor too);
- its chat template: the family's official one, which renders typed image/audio content parts. tunekit's
  generated template renders text only (an ``<image>`` placeholder stays text), so it is not written for a
  multimodal model; training ids equal the official template's rendering (tests/multimodal/test_vlm_*.py).

The media settings training used go with them (:func:`trained_media_settings`): a media option set for the run
(``image_min_pixels`` ..., in the export config or recorded in the adapter's / run folder's ``tunekit_config.yaml``)
is written into the copied Qwen-VL processor files (image ``size``, video ``fps`` / ``max_frames``), so the exported
folder's processor, ``tunekit chat`` and plain transformers expand media as training did; options left unset (the
folder's own settings, ``data.mm_plugins.settings``) leave the files unchanged.

A tunekit run folder (full or freeze fine-tuning) holds weights, config and tokenizer but no processor files; they,
and the official template, then come from the base model its run started from (``model_name_or_path`` in the
folder's ``tunekit_config.yaml``, or in its parent's for a ``checkpoint-N``). Quantized export of these models
is refused by name, and the family's multimodal template is required (:func:`check_multimodal_export`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ..config.problems import Problem
from ..config.schema import Config
from ..data.media_columns import PROCESSOR_FILES
from ..data.mm_plugins import FAMILIES
from ..data.mm_plugins.settings import set_options
from ..data.templates import get_template, list_templates
from ..errors import ConfigError, ModelError
from ..model.loader import load_model_config, model_path
from ..model.multimodal import is_multimodal_config
from ..train.resume import saved_run_config
from .quantize import quantization_method

#: processor files copied from the model folder (transformers' IMAGE_PROCESSOR_NAME, VIDEO_PROCESSOR_NAME,
#: PROCESSOR_NAME)
#: the files that make AutoProcessor find an image processor / feature extractor (one of them is needed)
PROCESSOR_CORE = ("preprocessor_config.json", "processor_config.json")


def check_multimodal_export(cfg: Config) -> None:
    """Before anything is loaded or written: for a model with a vision or audio part (its config.json), the family's
    multimodal template must be set, and ``export_quantization_bit`` is refused (:func:`refuse_quantization`)."""

    config = load_model_config(cfg)
    if not is_multimodal_config(config):
        return
    if cfg.export_quantization_bit is not None:
        refuse_quantization(cfg, config.model_type)

    if cfg.template not in FAMILIES:
        import importlib

        if cfg.template and cfg.template not in list_templates():
            get_template(cfg.template)  # an unknown name is that error (with its suggestions), not "not multimodal"

        serving = sorted(
            t
            for t, m in FAMILIES.items()
            if config.model_type in importlib.import_module(f"tunekit.data.mm_plugins.{m}").PLUGIN.MODEL_TYPES
        )
        message = (
            f"template '{cfg.template}' is not a multimodal template, but {cfg.model_name_or_path} is a "
            f"vision-language/audio model (model_type '{config.model_type}'): set template to the one it was "
            f"trained with ({', '.join(serving or sorted(FAMILIES))}), so the export's stop tokens and "
            f"`tunekit verify` follow it. Nothing was written."
        )
        raise ConfigError(message, problems=(Problem(message, ("template",)),))


def refuse_quantization(cfg: Config, model_type: str) -> None:
    """``export_quantization_bit`` with a vision-language/audio model, refused by name."""

    message = (
        f"export_quantization_bit {cfg.export_quantization_bit} ({quantization_method(cfg)}) is not supported for "
        f"'{model_type}' models, which have a vision or audio part: tunekit quantizes text models only (GPTQ "
        f"calibrates on text, and its bitsandbytes path loads AutoModelForCausalLM, which drops the vision/audio "
        f"tower). Remove export_quantization_bit to export the merged model unquantized. Nothing was written."
    )
    raise ConfigError(message, problems=(Problem(message, ("export_quantization_bit",)),))


def _found(source: str, cfg: Config) -> dict[str, str]:
    """``{file name: local path}`` of the processor files ``source`` (a local folder or a hub id) has."""
    folder = Path(source).expanduser()
    if folder.is_dir():
        return {name: str(folder / name) for name in PROCESSOR_FILES if (folder / name).is_file()}
    from transformers.utils import cached_file

    out = {}
    for name in PROCESSOR_FILES:
        path = cached_file(
            source,
            name,
            cache_dir=cfg.cache_dir,
            revision=cfg.model_revision,
            _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
        )
        if path:
            out[name] = path
    return out


def recorded_base(folder: Path) -> str | None:
    """The ``model_name_or_path`` a tunekit run folder (or its ``checkpoint-N``) was trained from, else None."""

    saved, _ = saved_run_config(folder)
    base = (saved or {}).get("model_name_or_path")
    return str(base) if base and Path(str(base)).expanduser().resolve() != folder.resolve() else None


def processor_source(cfg: Config) -> tuple[str, dict[str, str]]:
    """(the folder or hub id the processor files and chat template come from, ``{name: local path}``); see the
    module docstring. A :class:`ModelError` naming the files and the fix when none is found."""

    source = model_path(cfg)
    files = _found(source, cfg)
    tried = [source]
    base = recorded_base(Path(source)) if not files and Path(source).is_dir() else None
    if base:
        files, tried = _found(base, cfg), tried + [base]
        source = base
    if not any(name in files for name in PROCESSOR_CORE):
        raise ModelError(
            f"{' nor '.join(tried)} has no {' or '.join(PROCESSOR_CORE)}: the exported vision-language/audio "
            f"model would have no image processor (feature extractor), so AutoProcessor could not load it. "
            f"Copy the base model's processor files into {tried[0]} "
            f"(AutoProcessor.from_pretrained(base).save_pretrained(folder)), then export again."
        )
    return source, files


def official_chat_template(source: str, cfg: Config, tokenizer) -> str | None:
    """The chat template of ``source``'s tokenizer (the model folder's own, official one)."""

    if source == model_path(cfg):
        return getattr(tokenizer, "chat_template", None)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(
        source, trust_remote_code=cfg.trust_remote_code, cache_dir=cfg.cache_dir, revision=cfg.model_revision
    ).chat_template


def trained_media_settings(cfg: Config) -> dict[str, Any]:
    """The media options set for the model being exported: the export config's, else those recorded (not null) in the
    ``tunekit_config.yaml`` of its adapters (the last first) or of the model folder (a full fine-tuning run)."""

    return set_options(cfg, model_folder=True)


def processor_edits(cfg: Config, files: dict[str, str], settings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{file name: {key: value}}`` written over the copied processor files so they hold ``settings``: Qwen-VL's image
    ``size`` and video ``fps`` / ``max_frames`` (the other families' processors have no such keys: a pixel option of
    theirs resizes images before the processor, which the exported folder cannot say, and the export warns)."""
    import json
    import logging

    edits: dict[str, dict[str, Any]] = {}
    image = {
        k: settings[o]
        for k, o in (("shortest_edge", "image_min_pixels"), ("longest_edge", "image_max_pixels"))
        if o in settings
    }
    video = {k: settings[o] for k, o in (("fps", "video_fps"), ("max_frames", "video_maxlen")) if o in settings}
    if FAMILIES.get(cfg.template or "") not in ("qwen2_vl", "qwen3_vl"):
        if image:
            logging.getLogger(__name__).warning(
                "image_min_pixels / image_max_pixels resized images before the %s processor in training; the exported "
                "folder's processor does not (it has no such setting): resize images the same way at inference.",
                cfg.template,
            )
        return edits
    if image and "preprocessor_config.json" in files:
        saved = json.loads(Path(files["preprocessor_config.json"]).read_text(encoding="utf-8"))
        size = {**(saved.get("size") or {}), **image}
        edits["preprocessor_config.json"] = {
            "size": size,
            **{
                old: size[new]
                for old, new in (("min_pixels", "shortest_edge"), ("max_pixels", "longest_edge"))
                if old in saved and new in size
            },
        }
    if video and "video_preprocessor_config.json" in files:
        edits["video_preprocessor_config.json"] = video
    return edits


def media_export(cfg: Config, model, tokenizer) -> dict[str, Any] | None:
    """For a multimodal model: what :func:`write_processor` needs (and provenance records); None for a text model."""

    if not is_multimodal_config(model.config):
        return None
    source, files = processor_source(cfg)
    settings = trained_media_settings(cfg)
    return {
        "model_class": type(model).__name__,
        "processor_source": source,
        "processor_files": sorted(files),
        "paths": files,
        "chat_template": official_chat_template(source, cfg, tokenizer),
        "media_settings": settings,
        "edits": processor_edits(cfg, files, settings),
    }


def write_processor(media: dict[str, Any], out: Path) -> None:
    """Copy the processor files into ``out`` with the settings training used written over them (``media["edits"]``);
    the tokenizer, with the official template, is saved by the caller."""
    import json

    for name, path in media["paths"].items():
        shutil.copyfile(path, out / name)
        if media.get("edits", {}).get(name):
            data = json.loads((out / name).read_text(encoding="utf-8"))
            (out / name).write_text(json.dumps({**data, **media["edits"][name]}, indent=2) + "\n", encoding="utf-8")


def provenance_entry(media: dict[str, Any] | None) -> dict[str, Any] | None:
    if media is None:
        return None
    entry = {k: media[k] for k in ("model_class", "processor_source", "processor_files")}
    if media.get("media_settings"):  # the media options training set (written into the processor files)
        entry["media_settings"] = media["media_settings"]
    return entry
