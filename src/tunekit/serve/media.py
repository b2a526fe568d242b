"""Images, videos and audio in API requests: OpenAI content parts → checked local files → the prompt's media inputs.

Parts (in a user message's ``content`` list, in order with its text parts):
``{"type": "image_url", "image_url": {"url": ...}}``, ``video_url`` and ``audio_url`` alike (vLLM's and
LLaMA-Factory's names), and OpenAI's ``{"type": "input_audio", "input_audio": {"data": BASE64, "format": "wav"}}``.
A URL is either inline, ``data:image/png;base64,...`` (decoded into a private temporary folder that is deleted
as soon as the prompt is rendered), or a local file, ``file:///...`` or a path, read only when it lies under
``api_media_dir`` after symlinks and ``..`` are resolved (unset: no file is read; LLaMA-Factory's
``SAFE_MEDIA_PATH`` environment variable is read when the option is unset). ``http(s)`` URLs are refused: the
server fetches nothing from the network. Every item's decoded size is at most ``api_max_media_mb`` (413).

Every refusal is a 400 naming the part (``messages[0].content[1]``) and the fix: media sent to a text-only model or
a kind the family does not read (checked before anything is decoded), a malformed data URL or base64, a file
outside the folder, an image / video / audio that cannot be decoded; each keyed (``config/problem_texts_api.py``),
said in English. The prompt itself is rendered by
:func:`tunekit.infer.media_prompt.render_parts` in a worker thread (image processing is CPU work).
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.problems import Said, config_error
from ..config.schema import Config
from ..errors import TunekitError
from ..infer.media_prompt import ITEM, MediaFile, check_kinds, render_parts
from .request_checks import APIError

#: content part type -> media kind
PART_KINDS = {"image_url": "images", "video_url": "videos", "audio_url": "audios", "input_audio": "audios"}
MIME = {"images": "image", "videos": "video", "audios": "audio"}
MB = 10**6
_DATA_URL = re.compile(r"^data:(?P<mime>[^;,]*)(?P<params>(;[^;,]*)*),(?P<data>.*)$", re.DOTALL)
_SCHEME = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*):")


@dataclass(frozen=True)
class MediaPolicy:
    """Which files a request may name (``folder``, resolved; None: none), the largest decoded item (bytes), and where
    inline media are decoded to (``scratch``: a private folder is made in it per request; None: the system's temp)."""

    folder: Path | None = None
    max_bytes: int = 20 * MB
    scratch: Path | None = None

    @classmethod
    def from_config(cls, cfg: Config) -> MediaPolicy:
        folder = getattr(cfg, "api_media_dir", None) or os.environ.get("SAFE_MEDIA_PATH") or None
        if folder is not None:
            resolved = Path(os.path.realpath(Path(folder).expanduser()))
            if not resolved.is_dir():
                raise config_error("api_media_dir_not_folder", ("api_media_dir",), folder=str(folder))
            folder = resolved
        return cls(folder, int(getattr(cfg, "api_max_media_mb", 20.0) * MB))

    def body_bytes(self, base: int) -> int:
        """The request body limit of a server that reads media: ``base`` + one largest item in base64."""
        return base + 4 * math.ceil(self.max_bytes / 3)


@dataclass(frozen=True)
class MediaSource:
    """A media content part as sent (not yet decoded or read): its kind, the part, where it is in the request."""

    kind: str
    part: Any
    where: str


def is_media_part(part_type: str) -> bool:
    return part_type in PART_KINDS


def media_source(part, where: str) -> MediaSource:
    return MediaSource(PART_KINDS[part.type], part, where)


# ------------------------------------------------------------------------------------ one part -> one local file
def _refused(key: str, where: str, kind: str | None = None, **values: Any) -> APIError:
    """The 400 of the refusal ``key`` (``config/problem_texts_api.py``) about the part at ``where``; ``kind``: the
    part's media kind, said as ``{item}``."""
    item = {"item": Said(f"part_item_{kind}")} if kind else {}
    return APIError(400, Said(key, where=where, **item, **values), param=where)


def _too_large(where: str, kind: str, size: int, policy: MediaPolicy) -> APIError:
    item, limit = Said(f"part_item_{kind}"), policy.max_bytes / MB
    said = Said("api_media_too_large", where=where, item=item, size=size / MB, limit=limit)
    return APIError(413, said, param=where, code="media_too_large")


def _decode_base64(data: str, where: str, kind: str, policy: MediaPolicy) -> bytes:
    data = re.sub(r"\s+", "", data)
    size = len(data) * 3 // 4 - data[-2:].count("=")
    if size > policy.max_bytes:  # before decoding
        raise _too_large(where, kind, size, policy)
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise _refused("api_media_bad_base64", where, kind) from None
    if not raw:
        raise _refused("api_media_empty", where, kind)
    return raw


def _data_url(url: str, where: str, kind: str, policy: MediaPolicy) -> tuple[bytes, str]:
    """The bytes of a ``data:TYPE/SUB;base64,...`` URL and a file suffix from its subtype."""
    found = _DATA_URL.match(url)
    mime = (found.group("mime") if found else "").strip().lower()
    if not found or ";base64" not in found.group("params").lower():
        raise _refused("api_media_data_url_base64", where, mime=MIME[kind])
    main, _, sub = mime.partition("/")
    if main != MIME[kind]:
        raise _refused("api_media_data_url_type", where, kind, got=mime or "none", mime=MIME[kind])
    return _decode_base64(found.group("data"), where, kind, policy), _suffix(sub)


def _suffix(subtype: str | None) -> str:
    clean = re.sub(r"[^a-z0-9]", "", (subtype or "").lower())[:10]
    return f".{clean}" if clean else ".bin"


def _local_file(path: str, where: str, kind: str, policy: MediaPolicy) -> Path:
    """A file the request names, if it lies under ``api_media_dir`` once symlinks and ``..`` are resolved."""
    if policy.folder is None:
        raise _refused("api_media_no_files", where, kind)
    given = Path(path)
    real = Path(os.path.realpath(given if given.is_absolute() else policy.folder / given))
    if not real.is_relative_to(policy.folder):
        raise _refused("api_media_outside", where, path=path)
    if not real.is_file():
        raise _refused("api_media_not_file", where, path=path)
    size = real.stat().st_size
    if size > policy.max_bytes:
        raise _too_large(where, kind, size, policy)
    return real


def _file_url(url: str, where: str) -> str:
    from urllib.parse import unquote, urlparse

    parsed = urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise _refused("api_media_file_host", where, host=parsed.netloc)
    return unquote(parsed.path)


def _url_of(part, where: str) -> str:
    ref = getattr(part, part.type)
    url = ref if isinstance(ref, str) else getattr(ref, "url", None)
    if not url:
        raise _refused("api_media_no_url", where, part=part.type)
    return url


def fetch(src: MediaSource, policy: MediaPolicy, tmp: Path, index: int) -> MediaFile:
    """The local file of one media part: decoded into ``tmp`` (inline data) or a checked file under the folder."""
    kind, where, part = src.kind, src.where, src.part
    if part.type == "input_audio":
        if part.input_audio is None or not part.input_audio.data:
            raise _refused("api_media_audio_data", where)
        data = part.input_audio.data
        if data.startswith("data:"):
            raw, suffix = _data_url(data, where, kind, policy)
        else:
            raw, suffix = _decode_base64(data, where, kind, policy), _suffix(part.input_audio.format)
    else:
        url = _url_of(part, where)
        scheme = _SCHEME.match(url).group("scheme").lower() if _SCHEME.match(url) else ""
        if scheme == "data":
            raw, suffix = _data_url(url, where, kind, policy)
        elif scheme in ("http", "https"):
            raise _refused("api_media_remote", where, kind, scheme=scheme)
        elif scheme == "file":
            return _checked(MediaFile(kind, str(_local_file(_file_url(url, where), where, kind, policy)), where))
        elif len(scheme) > 1:  # not a Windows drive letter
            raise _refused("api_media_scheme", where, scheme=scheme)
        else:
            return _checked(MediaFile(kind, str(_local_file(url, where, kind, policy)), where))
    path = tmp / f"{index}{suffix}"
    path.write_bytes(raw)
    return _checked(MediaFile(kind, str(path), where))


def _checked(item: MediaFile) -> MediaFile:
    """400 unless the item decodes: an image fully, a video/audio file far enough to show its stream."""
    where = item.where
    if item.kind == "images":
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(item.path) as img:
                img.load()
        except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
            reason = str(exc).replace(repr(item.path), "").replace(item.path, "").strip()[:120]
            raise _refused("api_image_undecodable", where, error=type(exc).__name__, reason=reason) from None
        return item
    try:
        import av
    except ImportError:
        raise _refused("api_media_needs_av", where, item.kind) from None
    try:
        with av.open(item.path) as container:
            streams = container.streams.video if item.kind == "videos" else container.streams.audio
            if not streams:
                raise ValueError(f"no {ITEM[item.kind]} stream")
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        reason = str(exc).replace(repr(item.path), "").replace(item.path, "").strip(" :")[:120]
        raise _refused("api_media_undecodable", where, item.kind, error=type(exc).__name__, reason=reason) from None
    return item


# ------------------------------------------------------------------------------------ the request's prompt
def sources_of(turns: list[dict]) -> list[MediaSource]:
    return [p for t in turns if isinstance(t["content"], list) for p in t["content"] if isinstance(p, MediaSource)]


def render_with_media(
    engine, policy: MediaPolicy, turns: list[dict], system: str | None, tools: Any, parse_special_tokens: bool
) -> tuple[list[int], dict]:
    """Prompt ids and media inputs of a conversation whose user turns hold :class:`MediaSource` pieces (blocking:
    run it in a worker thread). The decoded files live in a temporary folder removed before this returns."""
    sources = sources_of(turns)
    first: dict[str, str] = {}
    for src in sources:
        first.setdefault(src.kind, src.where)
    try:
        check_kinds(engine, first)  # before anything is decoded
    except TunekitError as exc:
        raise APIError(400, str(exc), param=next(iter(first.values()))) from None
    with tempfile.TemporaryDirectory(prefix="tunekit-api-media-", dir=policy.scratch) as tmp:
        files = {id(s): fetch(s, policy, Path(tmp), k) for k, s in enumerate(sources)}
        messages = [
            {**t, "content": [files[id(p)] if isinstance(p, MediaSource) else p for p in t["content"]]}
            if isinstance(t["content"], list)
            else t
            for t in turns
        ]
        try:
            return render_parts(engine, messages, system, tools, parse_special_tokens=parse_special_tokens)
        except TunekitError as exc:
            message = str(exc)
            for item in files.values():  # name the part, never the temporary file
                message = message.replace(item.path, item.where)
            raise APIError(400, message, param="messages") from None
