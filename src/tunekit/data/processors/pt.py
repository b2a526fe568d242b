"""Continued pretraining: plain text → token blocks.

Each text becomes ``[bos] + tokens + [document end]`` (BOS only if the tokenizer has one). The document
end is the vocabulary's end-of-document token (:func:`document_end`), not the chat end-of-turn that
templates with ``replace_eos`` make the EOS: ``<|end_of_text|>`` for Llama 3, ``<|endoftext|>`` for Qwen.
With packing (the default for ``pt``) the texts of a map batch are concatenated and cut into blocks of
exactly ``cutoff_len`` tokens, so no batch carries padding; the last, shorter block of each map batch is
kept (no text is lost). Without packing every text is its own sample, cut to ``cutoff_len`` (reported as
truncated). Every token is trained (``labels == input_ids``).
"""

from __future__ import annotations

import logging
from typing import Any

from ...config.problems import Said
from ...errors import DataError
from ..templates.registry import SPECS
from . import KEPT, TRUNCATED
from .context import ProcessContext

logger = logging.getLogger(__name__)

OUTPUT_COLUMNS = ("input_ids", "labels", "length", "_status", "_source")
_ANNOUNCED: set[tuple[str, str]] = set()  # said once per process


def _token_id(tokenizer: Any, token: str) -> int | None:
    """The id of ``token`` if the vocabulary holds it as one token (not the unknown token)."""
    tid = tokenizer.convert_tokens_to_ids(token)
    if tid is None or (
        tokenizer.unk_token_id is not None and tid == tokenizer.unk_token_id and token != tokenizer.unk_token
    ):
        return None
    return tid if tokenizer.convert_ids_to_tokens(tid) == token else None


def document_end(tokenizer: Any, template: Any = None) -> tuple[int, str, str]:
    """``(id, token, why)`` of the token that ends every pretraining document.

    The template's family declares it (``TemplateSpec.document_end``). Otherwise (no template: ``stage: pt``
    needs none; ``jinja``; a template that declares none) it is the tokenizer's EOS, unless that EOS is a
    known family's chat end-of-turn (an instruct tokenizer: ``<|eot_id|>``, ``<|im_end|>``) and the
    vocabulary holds that family's document token, which is then used.
    """
    spec = getattr(template, "spec", None)
    eos, eos_id = tokenizer.eos_token, tokenizer.eos_token_id
    note = "no chat template: " if spec is None else f"template '{spec.name}' declares none: "
    if spec is not None and spec.document_end is not None:
        tid = _token_id(tokenizer, spec.document_end)
        if tid is not None:
            return tid, spec.document_end, f"the document token of template '{spec.name}'"
        note = f"template '{spec.name}' ends documents with {spec.document_end}, which this tokenizer does not have: "
    for family in SPECS:
        if family.document_end and family.document_end != eos and eos in (family.eos, *family.stop_words):
            tid = _token_id(tokenizer, family.document_end)
            if tid is not None:
                return (
                    tid,
                    family.document_end,
                    (
                        f"{note}the tokenizer's EOS {eos} is the {family.name} chat "
                        f"end-of-turn, so documents end with that family's document token"
                    ),
                )
    if eos_id is None:
        raise DataError(Said("data_pt_no_eos"))
    return eos_id, eos, f"{note}the tokenizer's EOS"


def announce_document_end(tokenizer: Any, template: Any = None) -> int:
    """Say (once per process) which token ends the documents: a warning when no template names it; its id."""
    end_id, token, why = document_end(tokenizer, template)
    if (token, why) not in _ANNOUNCED:
        _ANNOUNCED.add((token, why))
        level = logging.INFO if why.startswith("the document token") else logging.WARNING
        logger.log(level, "stage pt: documents end with %s (%s).", token, why)
    return end_id


def _encode(batch: dict[str, list], ctx: ProcessContext) -> list[list[int]]:
    tok = ctx.tokenizer
    end_id = announce_document_end(tok, ctx.template)
    ids = ctx.encode_pieces(list(batch["text"]))
    bos_id = tok.bos_token_id
    bos = [bos_id] if bos_id is not None and bos_id not in (end_id, tok.eos_token_id) else []
    return [bos + x + [end_id] for x in ids]


def pack(ids: list[list[int]], sources: list[str], block: int) -> dict[str, list]:
    """Concatenate ``ids`` and cut into ``block``-token pieces; the source names the records each piece spans."""
    out: dict[str, list] = {key: [] for key in OUTPUT_COLUMNS}
    owner = [i for i, x in enumerate(ids) for _ in x]
    flat = [t for x in ids for t in x]
    for start in range(0, len(flat), block):
        piece = flat[start : start + block]
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
