"""Multimodal samples: media checked per record, placeholders expanded by the family plugin, then SFT.

Two steps, so that every problem is named with its file and record and follows ``bad_records``:

1. :func:`prepare_media` (per record, in the pipeline's record loop): refuse media for a text-only
   template/model, refuse media kinds the family cannot train on yet, resolve each path against
   ``media_dir`` (else ``dataset_dir``), open and fully decode each image, and store how many tokens each
   becomes (``_image_tokens``, from the family's own image processor with the model folder's settings, or the
   media options where set: ``mm_plugins.settings``); each
   video / audio is decoded too and the text its placeholder becomes is stored (``_video_text`` /
   ``_audio_text``, from the family plugin's ``video_expansions`` / ``audio_expansions``).
2. :func:`process` (``datasets.map``): each ``<image>`` / ``<video>`` / ``<audio>`` in the messages becomes the
   family's token run (``data/mm_plugins``), then the SFT processor tokenizes, masks and cuts as for text. Media
   tokens are never trained (also with ``train_on_prompt``). A multimodal sample is never cut: one that does not fit
   ``cutoff_len`` whole is dropped and listed in the report (cutting through an image would leave the
   model fewer image tokens than image patches).
"""

from __future__ import annotations

from typing import Any

from ...config.problems import Said, message_of
from ...errors import DataError
from ..formats import RecordError
from ..media_columns import MEDIA_COLUMNS
from ..mm_plugins import PLACEHOLDERS, resolve_media
from . import DROPPED, TRUNCATED, kto, pairwise, sft

OUTPUT_COLUMNS = sft.OUTPUT_COLUMNS + MEDIA_COLUMNS
SUPPORTED_STAGES = ("sft", "dpo", "kto", "rm")


def prepare_media(sample: dict[str, Any], ctx, stage: str) -> dict[str, Any]:
    """Check and resolve one canonical sample's media (see the module docstring); raises :class:`RecordError`."""
    where = sample["_source"]
    kinds = [k for k in PLACEHOLDERS if sample.get(k)]
    if ctx.mm is None:
        if kinds:
            template = str(getattr(ctx.template, "name", None))
            said = Said(
                "media_text_only_template", where=where, kinds=", ".join(kinds), template=template, first=kinds[0]
            )
            raise RecordError(said)
        return sample
    if stage not in SUPPORTED_STAGES:
        raise DataError(Said("media_stage_unsupported", stage=stage, supported=", ".join(SUPPORTED_STAGES)))
    unsupported = [k for k in kinds if k not in ctx.mm.MEDIA]
    if unsupported:
        names, media, first = ", ".join(unsupported), ", ".join(ctx.mm.MEDIA), unsupported[0]
        said = Said("media_family_unsupported", where=where, kinds=names, family=ctx.mm.NAME, media=media, first=first)
        raise RecordError(said)
    from pathlib import Path

    try:
        paths = resolve_media(sample.get("images") or [], "images", Path(ctx.media_root), where)
        counts = ctx.mm.image_token_counts(paths, where)
        out = {**sample, "images": paths, "_image_tokens": counts}
        for kind, expand in (("videos", "video_expansions"), ("audios", "audio_expansions")):
            found = resolve_media(sample.get(kind) or [], kind, Path(ctx.media_root), where)
            out[kind], out[f"_{kind[:-1]}_text"] = found, getattr(ctx.mm, expand)(found, where) if found else []
    except DataError as exc:
        raise RecordError(message_of(exc)) from None
    return out


def _splice(text: str, tag: str, texts: list[str], start: int) -> tuple[str, int]:
    """``text`` with its k-th ``tag`` replaced by ``texts[start + k]``; returns (text, next index)."""
    parts = text.split(tag)
    return parts[0] + "".join(texts[start + k] + rest for k, rest in enumerate(parts[1:])), start + len(parts) - 1


def expand_messages(
    messages: list[dict[str, Any]], counts: list[int], mm, videos: list[str] = (), audios: list[str] = ()
) -> list[dict[str, Any]]:
    out, k, v, a = [], 0, 0, 0
    for m in messages:
        content, k = mm.expand(m["content"], counts, k)
        if videos:
            content, v = _splice(content, PLACEHOLDERS["videos"], list(videos), v)
        if audios:
            content, a = _splice(content, PLACEHOLDERS["audios"], list(audios), a)
        out.append({**m, "content": content})
    return out


def _expanded(batch: dict[str, list], ctx, n: int) -> dict[str, list]:
    counts = batch.get("_image_tokens") or [[]] * n
    videos, audios = batch.get("_video_text") or [[]] * n, batch.get("_audio_text") or [[]] * n
    expanded = dict(batch)
    expanded["messages"] = [
        expand_messages(batch["messages"][i], counts[i] or [], ctx.mm, videos[i] or [], audios[i] or [])
        for i in range(n)
    ]
    return expanded


def processor_for(stage: str):
    """The module-like processor of a multimodal dataset for ``stage`` (``process(batch, ctx)``)."""
    import types

    return types.SimpleNamespace(process={"sft": process, "kto": process_kto}.get(stage, process_pairs))


def _finish(out: dict[str, list], batch: dict[str, list], n: int) -> dict[str, list]:
    for kind in MEDIA_COLUMNS:
        out[kind] = [list(batch[kind][i] or []) for i in range(n)] if kind in batch else [[] for _ in range(n)]
    for i in range(n):
        if (out["images"][i] or out["videos"][i] or out["audios"][i]) and out["_status"][i] == TRUNCATED:
            out["_status"][i] = DROPPED
    return out


def process_pairs(batch: dict[str, list], ctx) -> dict[str, list]:
    """dpo: the prompt's placeholders expanded, then the pairwise processor (only answers are labelled)."""
    n = len(batch["messages"])
    return _finish(pairwise.process(_expanded(batch, ctx, n), ctx), batch, n)


def process_kto(batch: dict[str, list], ctx) -> dict[str, list]:
    """kto: the placeholders expanded, then the kto processor (only the last reply is labelled; its mismatched pair
    for the KL estimate is this prompt, with this sample's media, and another sample's answer:
    ``train/stages/kto.py``)."""
    n = len(batch["messages"])
    return _finish(kto.process(_expanded(batch, ctx, n), ctx), batch, n)


def process(batch: dict[str, list], ctx) -> dict[str, list]:
    n = len(batch["messages"])
    out = sft.process(_expanded(batch, ctx, n), ctx)
    media_ids = ctx.mm.media_token_ids()
    for i in range(n):
        if ctx.train_on_prompt:
            out["labels"][i] = [ctx.ignore_index if t in media_ids else t for t in out["labels"][i]]
            out["_trainable"][i] = sum(1 for t in out["labels"][i] if t != ctx.ignore_index)
    return _finish(out, batch, n)
