"""Prompts with images, videos and audio for ``tunekit api`` and ``tunekit predict``: ids + the model's media inputs.

Both entry points end in what a :class:`~tunekit.infer.engine.Generation` takes (``engine.start_ids(ids, media)``,
``engine.generate_batch([ids], media)``), with every media item expanded by the model family's plugin
(``data/mm_plugins``) exactly as training expands it:

- :func:`render_sample` (predict / do_predict): a dataset sample's messages with ``<image>`` / ``<video>`` /
  ``<audio>`` placeholders and its resolved media lists, expanded by training's own
  ``data.processors.media.expand_messages``, so the prompt ids equal the training prompt's;
- :func:`render_parts` (the API): messages whose content is a list of text pieces and :class:`MediaFile` pieces
  (OpenAI content parts, in order). The client's text is never searched for placeholders (an ``<image>`` it types
  stays text); each media piece becomes its family's token run, a
  :class:`~tunekit.infer.untrusted.Trusted` piece, so with ``api_parse_special_tokens`` off the client's text is
  still encoded as ordinary text and only the runs are control tokens.

After rendering, the number of media tokens in the ids is checked against the expansions (text that spells a media
token, with special-token parsing on, would otherwise make the model fail mid-generation).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.problems import Said, config_error
from ..config.schema import Config
from ..data.mm_plugins import FAMILIES, model_type_of
from ..data.processors.media import expand_messages
from .untrusted import Trusted

#: media kind -> what one item of it is called (errors say the kind with keyed parts: ``_media``, ``_item``)
ITEM = {"images": "image", "videos": "video", "audios": "audio"}


@dataclass(frozen=True)
class MediaFile:
    """One media item of a prompt: its kind (``images`` / ``videos`` / ``audios``), a local file, and how errors
    name it (``messages[0].content[1]``)."""

    kind: str
    path: str
    where: str


def _family_plugin(module: str):
    """The plugin of a family module of ``data/mm_plugins`` (``qwen2_vl``)."""
    return importlib.import_module(f"tunekit.data.mm_plugins.{module}").PLUGIN


def family_templates(model_type: str | None) -> list[str]:
    """The multimodal templates whose family plugin serves ``model_type`` (``llava_next``: ``["llava_next", ...]``)."""
    return [t for t, m in FAMILIES.items() if model_type in _family_plugin(m).MODEL_TYPES]


def family_examples() -> tuple[list[str], list[str]]:
    """One template per family (its first in ``FAMILIES``): those that read images, and the audio-only ones."""
    first = {m: t for t, m in reversed(FAMILIES.items())}
    ordered = sorted(first, key=list(FAMILIES.values()).index)
    reads = {m: _family_plugin(m).MEDIA for m in ordered}
    return (
        [first[m] for m in ordered if "images" in reads[m]],
        [first[m] for m in ordered if "images" not in reads[m]],
    )


def family_template(cfg: Config, chat_template: str | None = None) -> str | None:
    """The one multimodal template of the vision-language folder ``cfg.model_name_or_path`` (an exported VLM served
    without ``template``: ``llava_next_mistral`` for a LLaVA-NeXT on Mistral), or None (a text model, or several
    templates serve the family, as Qwen3-VL's thinking and no-thinking ones)."""
    if not cfg.model_name_or_path:
        return None
    model_type, multimodal = model_type_of(cfg.model_name_or_path)
    names = family_templates(model_type) if multimodal else []
    if len(names) > 1:  # variants on several language models (LLaVA-NeXT): the folder's text_config.model_type decides
        plugin = _family_plugin(FAMILIES[names[0]])
        if hasattr(plugin, "fits"):  # the folder's language model and chat template (``chat_template``) decide
            text_type = (
                json.loads((Path(cfg.model_name_or_path) / "config.json").read_text(encoding="utf-8"))
                .get("text_config", {})
                .get("model_type")
            )
            names = [n for n in names if plugin.fits(n, text_type, chat_template)]
    return names[0] if len(names) == 1 else None


def jinja_hint(cfg: Config, kind: str) -> Said | None:
    """Why ``template: jinja`` refuses media of a vision-language folder, naming the template to set; None otherwise.

    ``jinja`` renders the folder's own chat template with string contents, and the official VLM templates need typed
    content parts (LLaVA's drops string text; Gemma 3's trims the newlines its processor writes around an image), so
    the media layout would not be the processor's: the family's named template is
    (tests/serve/test_vlm_serving_families.py).
    """
    if cfg.template != "jinja" or not cfg.model_name_or_path:
        return None
    model_type, multimodal = model_type_of(cfg.model_name_or_path)
    names = family_templates(model_type) if multimodal else []
    if not names:
        return None
    return Said(
        "infer_jinja_media",
        media=_media(kind),
        model=cfg.model_name_or_path,
        model_type=model_type,
        choice=tuple(f"template: {t}" for t in names),
        item=_item(kind),
    )


def _media(kind: str) -> Said:
    """Several items of a media kind, in words ("images", "audio"; keyed so the board says it in its language)."""
    return Said(f"part_media_{kind}")


def _item(kind: str) -> Said:
    """One item of a media kind, in words (:data:`ITEM`, keyed)."""
    return Said(f"part_item_{kind}")


def check_kinds(engine, kinds: dict[str, str]) -> None:
    """ConfigError unless the engine's model reads every media kind in ``kinds`` (kind -> where it was sent)."""
    template = engine.cfg.template
    for kind, where in kinds.items():
        hint = jinja_hint(engine.cfg, kind) if engine.mm is None else None
        if hint:
            raise config_error("infer_where", ("template",), where=where, error=hint)
        if engine.mm is None:
            vision, audio = family_examples()
            raise config_error(
                "infer_text_only_model",
                where=where,
                template=template,
                media=_media(kind),
                vision=tuple(vision),
                audio=tuple(audio),
            )
        if kind not in engine.mm.MEDIA:
            raise config_error(
                "infer_family_media",
                where=where,
                family=engine.mm.NAME,
                readable=tuple(_media(k) for k in engine.mm.MEDIA),
                media=_media(kind),
                item=_item(kind),
            )


def _expansions(mm, media: dict[str, list[str]], where: str) -> tuple[dict[str, list[str]], list[int]]:
    """The text each item becomes (the family's token run), per kind in order; and each image's token count."""
    images, videos, audios = media["images"], media["videos"], media["audios"]
    counts = mm.image_token_counts(images, where) if images else []
    return {
        "images": [mm.expand("<image>", counts, k)[0] for k in range(len(images))],
        "videos": mm.video_expansions(videos, where) if videos else [],
        "audios": mm.audio_expansions(audios, where) if audios else [],
    }, counts


def _inputs(engine, ids: list[int], media: dict[str, list[str]], runs: dict[str, list[str]]) -> dict[str, Any]:
    """The model's media inputs for ``ids``, after checking that the ids hold exactly the runs' media tokens."""
    import torch

    media_ids = engine.mm.media_token_ids()
    with engine.encode_lock:
        run_ids = engine.tokenizer("".join(r for rs in runs.values() for r in rs), add_special_tokens=False)[
            "input_ids"
        ]
    want = sum(t in media_ids for t in run_ids)
    got = sum(t in media_ids for t in ids)
    if got != want:
        raise config_error("infer_media_tokens", got=got, want=want)
    extra = {k: media[k] for k in ("videos", "audios") if media[k]}
    return engine.mm.collate(media["images"], torch.tensor([ids]), **extra)


def render_sample(
    engine, messages: Sequence[dict], system: str | None, tools: Any, media: dict[str, list[str]], where: str
) -> tuple[list[int], dict[str, Any]]:
    """A dataset sample's prompt ids and media inputs (placeholders expanded as in training; ``media``: kind ->
    paths)."""
    media = {k: list(media.get(k) or []) for k in ITEM}
    check_kinds(engine, {k: where for k, v in media.items() if v})
    runs, counts = _expansions(engine.mm, media, where)
    expanded = expand_messages(list(messages), counts, engine.mm, runs["videos"], runs["audios"])
    ids = engine.render(expanded, system, tools)
    return ids, _inputs(engine, ids, media, runs)


def render_parts(
    engine, messages: Sequence[dict], system: str | None = None, tools: Any = None, parse_special_tokens: bool = False
) -> tuple[list[int], dict[str, Any]]:
    """Prompt ids and media inputs of messages whose contents may be lists of ``str`` and :class:`MediaFile` pieces."""
    items = [
        p for m in messages if isinstance(m.get("content"), list) for p in m["content"] if isinstance(p, MediaFile)
    ]
    if not items:
        return engine.render(messages, system, tools, parse_special_tokens=parse_special_tokens), {}
    first: dict[str, str] = {}
    for item in items:
        first.setdefault(item.kind, item.where)
    check_kinds(engine, first)
    media = {k: [i.path for i in items if i.kind == k] for k in ITEM}
    runs, _ = _expansions(engine.mm, media, items[0].where)
    taken = {k: iter(v) for k, v in runs.items()}
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = [Trusted(next(taken[p.kind])) if isinstance(p, MediaFile) else p for p in content]
            out.append({**m, "content": content})
        else:
            out.append(m)
    ids = engine.render(out, system, tools, parse_special_tokens=parse_special_tokens)
    return ids, _inputs(engine, ids, media, runs)
