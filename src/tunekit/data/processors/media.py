"""Multimodal samples: media checked per record, placeholders expanded by the family plugin, then SFT.

Two steps, so that every problem is named with its file and record and follows ``bad_records``:

1. :func:`prepare_media` (per record, in the pipeline's record loop): refuse media for a text-only
   template/model, refuse media kinds the family cannot train on yet, resolve each path against
   ``media_dir`` (else ``dataset_dir``), open and fully decode each image, and store how many tokens each
   becomes (``_image_tokens``, from the family's own image processor at the configured resolution).
2. :func:`process` (``datasets.map``): each ``<image>`` in the messages becomes the family's token run
   (``data/mm_plugins``), then the SFT processor tokenizes, masks and cuts as for text. Media tokens are
   never trained (also with ``train_on_prompt``). A multimodal sample is never cut: one that does not fit
   ``cutoff_len`` whole is dropped and listed in the report (cutting through an image would leave the
   model fewer image tokens than image patches).
"""

from __future__ import annotations

from typing import Any

from . import DROPPED, TRUNCATED
from . import pairwise, sft
from ..formats import RecordError
from ..mm_plugins import PLACEHOLDERS, resolve_media
from ...errors import DataError

OUTPUT_COLUMNS = sft.OUTPUT_COLUMNS + ("images",)
SUPPORTED_STAGES = ("sft", "dpo")


def prepare_media(sample: dict[str, Any], ctx, stage: str) -> dict[str, Any]:
    """Check and resolve one canonical sample's media (see the module docstring); raises :class:`RecordError`."""
    where = sample["_source"]
    kinds = [k for k in PLACEHOLDERS if sample.get(k)]
    if ctx.mm is None:
        if kinds:
            raise RecordError(f"{where}: has {', '.join(kinds)}, but template '{getattr(ctx.template, 'name', None)}' is "
                              f"text-only: train a vision-language model with its multimodal template (e.g. qwen2_vl for "
                              f"Qwen2-VL / Qwen2.5-VL), or remove the {kinds[0]} column from the dataset to train on the text.")
        return sample
    if stage not in SUPPORTED_STAGES:
        raise DataError(f"stage {stage} with a multimodal model is not supported by tunekit yet (supported: "
                        f"{', '.join(SUPPORTED_STAGES)}); see docs/multimodal.md.")
    unsupported = [k for k in kinds if k not in ctx.mm.MEDIA]
    if unsupported:
        raise RecordError(f"{where}: has {', '.join(unsupported)}; the {ctx.mm.NAME} family in tunekit trains on "
                          f"{', '.join(ctx.mm.MEDIA)} only so far (see docs/multimodal.md). Remove the record, or the "
                          f"{unsupported[0]} column.")
    from pathlib import Path

    try:
        paths = resolve_media(sample.get("images") or [], "images", Path(ctx.media_root), where)
        counts = ctx.mm.image_token_counts(paths, where)
    except DataError as exc:
        raise RecordError(str(exc)) from None
    return {**sample, "images": paths, "_image_tokens": counts}


def expand_messages(messages: list[dict[str, Any]], counts: list[int], mm) -> list[dict[str, Any]]:
    out, k = [], 0
    for m in messages:
        content, k = mm.expand(m["content"], counts, k)
        out.append({**m, "content": content})
    return out


def processor_for(stage: str):
    """The module-like processor of a multimodal dataset for ``stage`` (``process(batch, ctx)``)."""
    import types

    return types.SimpleNamespace(process=process if stage == "sft" else process_pairs)


def _finish(out: dict[str, list], batch: dict[str, list], n: int) -> dict[str, list]:
    out["images"] = [list(batch["images"][i] or []) for i in range(n)] if "images" in batch else [[] for _ in range(n)]
    for i in range(n):
        if out["images"][i] and out["_status"][i] == TRUNCATED:
            out["_status"][i] = DROPPED
    return out


def process_pairs(batch: dict[str, list], ctx) -> dict[str, list]:
    """dpo: the prompt's placeholders expanded, then the pairwise processor (only answers are labelled)."""
    n = len(batch["messages"])
    counts = batch.get("_image_tokens") or [[]] * n
    expanded = dict(batch)
    expanded["messages"] = [expand_messages(batch["messages"][i], counts[i] or [], ctx.mm) for i in range(n)]
    return _finish(pairwise.process(expanded, ctx), batch, n)


def process(batch: dict[str, list], ctx) -> dict[str, list]:
    n = len(batch["messages"])
    counts = batch.get("_image_tokens") or [[]] * n
    expanded = dict(batch)
    expanded["messages"] = [expand_messages(batch["messages"][i], counts[i] or [], ctx.mm) for i in range(n)]
    out = sft.process(expanded, ctx)
    media_ids = ctx.mm.media_token_ids()
    for i in range(n):
        if ctx.train_on_prompt:
            out["labels"][i] = [ctx.ignore_index if t in media_ids else t for t in out["labels"][i]]
            out["_trainable"][i] = sum(1 for t in out["labels"][i] if t != ctx.ignore_index)
    return _finish(out, batch, n)
