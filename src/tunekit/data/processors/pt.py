"""Continued pretraining: plain text → token blocks.

Each text becomes ``[bos] + tokens + [eos]`` (BOS only if the tokenizer has one). With packing (the
default for ``pt``) the texts of a map batch are concatenated and cut into blocks of exactly
``cutoff_len`` tokens, so no batch carries padding; the last, shorter block of each map batch is kept
(no text is lost). Without packing every text is its own sample, cut to ``cutoff_len`` (reported as
truncated). Every token is trained (``labels == input_ids``).
"""

from __future__ import annotations

from . import KEPT, TRUNCATED
from .context import ProcessContext

OUTPUT_COLUMNS = ("input_ids", "labels", "length", "_status", "_source")


def _encode(batch: dict[str, list], ctx: ProcessContext) -> list[list[int]]:
    tok = ctx.tokenizer
    ids = ctx.encode_pieces(list(batch["text"]))
    bos = [tok.bos_token_id] if tok.bos_token_id is not None and tok.bos_token_id != tok.eos_token_id else []
    return [bos + x + [tok.eos_token_id] for x in ids]


def pack(ids: list[list[int]], sources: list[str], block: int) -> dict[str, list]:
    """Concatenate ``ids`` and cut into ``block``-token pieces; the source names the records each piece spans."""
    out: dict[str, list] = {key: [] for key in OUTPUT_COLUMNS}
    owner = [i for i, x in enumerate(ids) for _ in x]
    flat = [t for x in ids for t in x]
    for start in range(0, len(flat), block):
        piece = flat[start:start + block]
        first, last = owner[start], owner[start + len(piece) - 1]
        src = sources[first] if first == last else f"{sources[first]} .. {sources[last].rsplit(', ', 1)[-1]}"
        out["input_ids"].append(piece)
        out["labels"].append(list(piece))
        out["length"].append(len(piece))
        out["_status"].append(KEPT)
        out["_source"].append(src)
    return out


def process(batch: dict[str, list], ctx: ProcessContext) -> dict[str, list]:
    ids = _encode(batch, ctx)
    if ctx.packing:
        return pack(ids, list(batch["_source"]), ctx.cutoff_len)
    out: dict[str, list] = {key: [] for key in OUTPUT_COLUMNS}
    for x, src in zip(ids, batch["_source"]):
        cut = x[: ctx.cutoff_len]
        out["input_ids"].append(cut)
        out["labels"].append(list(cut))
        out["length"].append(len(cut))
        out["_status"].append(TRUNCATED if len(x) > ctx.cutoff_len else KEPT)
        out["_source"].append(src)
    return out
