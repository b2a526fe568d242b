"""Media in records: the ``images`` / ``videos`` / ``audios`` columns, media content parts, and the placeholder count.

Paths are kept as written; the model family's plugin (``data/mm_plugins``) resolves and opens them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..config.problems import Said
from ..errors import RecordError
from .dataset_info import DatasetAttr
from .readers import RawRecord

MEDIA_PARTS = {
    "image_url": "images",
    "image": "images",
    "input_image": "images",
    "video": "videos",
    "video_url": "videos",
    "audio": "audios",
    "audio_url": "audios",
    "input_audio": "audios",
}

MEDIA_KINDS = {"images": "<image>", "videos": "<video>", "audios": "<audio>"}
MEDIA_COLUMNS = tuple(MEDIA_KINDS)  # ("images", "videos", "audios"): a record's and a tokenized row's media columns

#: A multimodal model folder's processor files (whatever it has of them): the image processor or audio feature
#: extractor, Qwen2-VL/Qwen3-VL's video processor, and the processor's own settings.
PROCESSOR_FILES = ("preprocessor_config.json", "video_preprocessor_config.json", "processor_config.json")


def media_columns(raw: RawRecord, attr: DatasetAttr) -> dict[str, list[str]]:
    """The record's ``images`` / ``videos`` / ``audios`` lists (paths as written; resolved by the pipeline)."""
    out: dict[str, list[str]] = {}
    for key in MEDIA_KINDS:
        col = attr.column(key)
        value = raw.data.get(col) if col else None
        if value is None or value == "":
            value = []
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            value = repr(str(value)[:120])
            raise RecordError(Said("record_media_not_paths", where=raw.where, column=col, key=key, value=value))
        out[key] = list(value)
    return out


def _media_url(part: dict[str, Any], kind: str) -> Any:
    body = part.get(kind)
    if isinstance(body, dict):  # OpenAI: {"type": "image_url", "image_url": {"url": ...}}
        body = body.get("url", body.get("path"))
    return body


def media_parts(
    raw: RawRecord, attr: DatasetAttr, media: dict[str, list[str]]
) -> tuple[RawRecord, dict[str, list[str]]]:
    """Media content parts (``{"type": "image_url", "image_url": {"url": PATH}}``, ``{"type": "image", "image": PATH}``
    ...) become a placeholder text part where they stand, their paths appended to the record's media lists in order."""
    col = attr.column("messages") or "messages"
    messages = raw.data.get(col)
    if not isinstance(messages, list) or not any(
        isinstance(m, dict) and isinstance(m.get(attr.tags.get("content_tag", "content")), list) for m in messages
    ):
        return raw, media
    content_tag = attr.tags.get("content_tag", "content")
    media = {k: list(v) for k, v in media.items()}
    out_messages = []
    for i, msg in enumerate(messages):
        parts = msg.get(content_tag) if isinstance(msg, dict) else None
        if not isinstance(parts, list):
            out_messages.append(msg)
            continue
        new_parts = []
        for j, part in enumerate(parts):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in MEDIA_PARTS:
                new_parts.append(part)
                continue
            key = MEDIA_PARTS[kind]
            url = _media_url(part, kind)
            if not isinstance(url, str) or not url:
                value = repr(str(part)[:120])
                said = Said("record_media_part_no_path", where=raw.where, index=i, part=j, kind=kind, value=value)
                raise RecordError(said)
            media[key].append(url[len("file://") :] if url.startswith("file://") else url)
            new_parts.append({"type": "text", "text": MEDIA_KINDS[key]})
        out_messages.append({**msg, content_tag: new_parts})
    return dataclasses.replace(raw, data={**raw.data, col: out_messages}), media


def check_placeholders(sample: dict[str, Any], raw: RawRecord, stage: str) -> None:
    """Each media file needs exactly one placeholder (``<image>`` ...) in the conversation's text.

    Checked for records that have media; a text-only record may hold the literal text (HTML, code).
    """
    if not any(sample[key] for key in MEDIA_KINDS):
        return
    texts = [m["content"] for m in sample["messages"]] + [
        sample[k]["content"] for k in ("chosen", "rejected") if sample.get(k)
    ]
    if stage == "pt" and sample.get("text"):
        texts = [sample["text"]]
    for key, tag in MEDIA_KINDS.items():
        found = sum(t.count(tag) for t in texts)
        if found != len(sample[key]):
            count = len(sample[key])
            raise RecordError(
                Said("record_placeholder_count", where=raw.where, found=found, tag=tag, count=count, key=key)
            )
