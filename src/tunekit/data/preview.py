"""Render a few samples as text pieces with their trainable flag (the web board highlights trained tokens).

For a multimodal dataset each run of a media token (Qwen2-VL's ``<|image_pad|>`` ...) is shown as one piece,
``<image> × 64 tokens``, and the sample lists its images, videos and audios (the resolved paths training reads).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config.schema import Config
from .dataset_info import resolve_datasets
from .labels import IGNORE_INDEX
from .media_columns import MEDIA_COLUMNS
from .pipeline import load_one, load_template, make_context

MEDIA_RUN = "{media} × {n} tokens"  # a collapsed run of media tokens (the board says it in its language)


@dataclass
class SamplePreview:
    """One rendered sample: ``pieces`` are ``(text, trainable, media)``; ``media`` is ``"<image>"`` (``<video>``,
    ``<audio>``) for a collapsed run of media tokens (then ``text`` is ``"<image> × N tokens"``), else None."""

    pieces: list[tuple[str, bool, str | None]]
    media_tokens: list[tuple[str, int]] = field(default_factory=list)  # (placeholder, tokens) of each run, in order
    images: list[str] = field(default_factory=list)
    videos: list[str] = field(default_factory=list)
    audios: list[str] = field(default_factory=list)


def media_token_kinds(mm, tokenizer) -> dict[int, str]:
    """The placeholder each media token id stands for, from the token's own text (``<|image_pad|>`` → ``<image>``,
    ``<|video_pad|>`` → ``<video>``, ``<|AUDIO|>`` → ``<audio>``). Begin/end markers (Gemma 3's
    ``<start_of_image>`` / ``<end_of_image>``) are one token each and stay visible as text."""
    kinds: dict[int, str] = {}
    for token_id in sorted(mm.media_token_ids() if mm is not None else ()):
        name = str(tokenizer.convert_ids_to_tokens(int(token_id))).lower()
        if "start" in name or "end" in name:
            continue
        kinds[int(token_id)] = "<video>" if "video" in name else "<audio>" if "audio" in name else "<image>"
    return kinds


def _pieces(ids: list[int], labels: list[int], tokenizer, kinds: dict[int, str]) -> SamplePreview:
    """Consecutive tokens with the same trainable flag as one decoded piece; each media run as its count."""
    sample = SamplePreview([])
    run: list[int] = []
    key = None  # (trainable, media token id or None)

    def flush() -> None:
        trainable, media = key
        if media is None:
            sample.pieces.append((tokenizer.decode(run), bool(trainable), None))
        else:
            sample.pieces.append((MEDIA_RUN.format(media=kinds[media], n=len(run)), bool(trainable), kinds[media]))
            sample.media_tokens.append((kinds[media], len(run)))

    for tok, lab in zip(ids, labels):
        now = (lab != IGNORE_INDEX, tok if tok in kinds else None)
        if key is not None and now != key:
            flush()
            run = []
        run.append(tok)
        key = now
    if run:
        flush()
    return sample


def preview_samples(cfg: Config, tokenizer, n: int = 3) -> list[SamplePreview]:
    """The first ``n`` samples of the first dataset after cutoff and masking, media runs collapsed."""
    template = load_template(cfg, tokenizer)
    ctx = make_context(cfg, tokenizer, template)
    attr = resolve_datasets(cfg.dataset_names[:1], cfg.dataset_dir)[0]
    ds, _ = load_one(attr, cfg, ctx, cfg.stage)
    kinds = media_token_kinds(ctx.mm, tokenizer)
    out = []
    for row in ds.select(range(min(n, len(ds)))):
        sample = _pieces(row["input_ids"], row["labels"], tokenizer, kinds)
        sample.images, sample.videos, sample.audios = (list(row.get(k) or []) for k in MEDIA_COLUMNS)
        out.append(sample)
    return out
