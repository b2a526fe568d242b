"""The data preview's media: thumbnails of the previewed samples' images and a list of every sample's images,
videos and audios with the tokens each placeholder became (``data.preview.SamplePreview``).

A thumbnail is a small PNG copy in the board's served folder (the one folder Gradio may serve), never the
dataset's file itself. A media path outside the folders the board may use (a record can name any path) gets
no thumbnail, and only its file name is listed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from tunekit.data.media_columns import MEDIA_COLUMNS

from .i18n import t
from .paths import PathPolicy, PathRefused, excerpt

THUMBNAIL_PX = 192  # the longer side of a preview thumbnail


def allowed_path(policy: PathPolicy, path: str) -> Path | None:
    """``path`` relative to the allowed root it is in, or None when it is outside them (or hidden)."""
    try:
        full = policy.check(path, "Media file")
    except PathRefused:
        return None
    for root in policy.roots:
        if full.is_relative_to(root):
            return full.relative_to(root)
    return full


def thumbnail(path: str, folder: Path) -> str:
    """A PNG of ``path`` at most :data:`THUMBNAIL_PX` on its longer side, in ``folder`` (made once per file
    version)."""
    from PIL import Image

    st = Path(path).stat()
    key = hashlib.sha256(f"{Path(path).resolve()}:{st.st_mtime_ns}:{st.st_size}".encode()).hexdigest()[:20]
    target = folder / f"thumb-{key}.png"
    if not target.exists():
        with Image.open(path) as img:
            small = img.convert("RGB")
            small.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
            small.save(target, format="PNG")
    return str(target)


def gallery(samples: Sequence, policy: PathPolicy, folder: Path) -> list[tuple[str, str]]:
    """``(thumbnail, caption)`` of each image of the samples inside the allowed folders, in order."""
    out = []
    for i, sample in enumerate(samples, 1):
        for j, path in enumerate(sample.images, 1):
            if allowed_path(policy, path) is not None:
                out.append((thumbnail(path, folder), f"#{i} · {j}: {Path(path).name}"))
    return out


def media_markdown(samples: Sequence, policy: PathPolicy, lang: str = "en") -> str:
    """One line per sample with media: its files (relative to their allowed folder) and media token counts."""
    lines = []
    for i, sample in enumerate(samples, 1):
        parts = []
        for kind in MEDIA_COLUMNS:
            names = []
            for path in getattr(sample, kind):
                rel = allowed_path(policy, path)
                names.append(
                    f"`{excerpt(rel, 120)}`"
                    if rel is not None
                    else f"`{excerpt(Path(path).name, 60)}` ({t('samples_outside', lang)})"
                )
            if names:
                parts.append(f"{t('samples_' + kind, lang)}: " + ", ".join(names))
        if sample.media_tokens:
            runs = ", ".join(f"`{media} × {count}`" for media, count in sample.media_tokens)
            parts.append(f"{t('samples_tokens', lang)}: {runs}")
        if parts:
            lines.append(f"- **#{i}** " + " · ".join(parts))
    return "\n".join(lines)


def preview_pieces(sample, lang: str = "en") -> list[tuple[str, str | None]]:
    """A previewed sample as ``(text, "trained" | "media" | None)`` pieces; a run of media tokens said in ``lang``
    (``<image> × 64 tokens``: ``data.preview.MEDIA_RUN``), its placeholder and count from ``sample.media_tokens``."""
    runs = iter(sample.media_tokens)  # one per media piece, in order
    pieces: list[tuple[str, str | None]] = []
    for text, trained, media in sample.pieces:
        if media:
            placeholder, count = next(runs)
            pieces.append((t("samples_media_run", lang).format(media=placeholder, n=count), "media"))
        else:
            pieces.append((text, "trained" if trained else None))
    return pieces
