"""Supervised fine-tuning: render with the template, tokenize, mask, cut.

Labels: only reply tokens (assistant content + the template's end-of-turn marker) are trained;
everything else is ``-100``. ``train_on_prompt`` trains every token; ``mask_history`` trains only the
last reply. Each template piece is tokenized on its own (no special tokens added), so the prompt
ids equal what inference tokenizes for the same conversation prefix. How history replies render is
decided by ``ProcessContext.render_turns`` (the same rule as dpo/rm/kto); cuts follow ``cutoff.py``.
"""

from __future__ import annotations

from typing import Any

from . import DROPPED, KEPT, TRUNCATED
from .context import ProcessContext
from .cutoff import Spans, fit_turns

OUTPUT_COLUMNS = ("input_ids", "labels", "length", "_status", "_source", "_prompt_len", "_response_len", "_trainable")


def encode_conversation(sample: dict[str, Any], ctx: ProcessContext) -> list[tuple[str, str]]:
    return ctx.render_turns(
        sample["messages"], sample.get("system"), sample.get("tools"), history_trained=not ctx.mask_history
    )


def head_for(sample: dict[str, Any], ctx: ProcessContext, known=()) -> Spans:
    """The conversation's runs of turns rendered on their own (what the cutoff policy keeps)."""
    return ctx.spans(
        sample["messages"],
        sample.get("system"),
        sample.get("tools"),
        history_trained=not ctx.mask_history,
        known=known,
    )


def build_example(
    turn_ids: list[tuple[list[int], list[int]]], ctx: ProcessContext, first_prompt: Spans | None = None
) -> dict[str, Any]:
    """Cut and label one tokenized conversation."""
    kept, truncated = fit_turns(turn_ids, ctx.cutoff_len, last_first=ctx.mask_history, first_prompt=first_prompt)
    last = len(turn_ids) - 1
    input_ids: list[int] = []
    labels: list[int] = []
    for i, (prompt, response) in kept:
        input_ids += prompt + response
        labels += prompt if ctx.train_on_prompt else [ctx.ignore_index] * len(prompt)
        trained = not ctx.mask_history or i == last
        labels += response if trained else [ctx.ignore_index] * len(response)
    trainable = sum(1 for t in labels if t != ctx.ignore_index)
    status = DROPPED if trainable == 0 else (TRUNCATED if truncated else KEPT)
    return {
        "input_ids": input_ids,
        "labels": labels,
        "length": len(input_ids),
        "_status": status,
        "_prompt_len": sum(len(p) for p, _ in turn_ids),
        "_response_len": sum(len(r) for _, r in turn_ids),
        "_trainable": trainable,
    }


def process(batch: dict[str, list], ctx: ProcessContext) -> dict[str, list]:
    n = len(batch["messages"])
    samples = [{key: batch[key][i] for key in batch} for i in range(n)]
    rendered = [encode_conversation(s, ctx) for s in samples]
    pieces = [text for turns in rendered for pair in turns for text in pair]
    ids = ctx.encode_pieces(pieces)
    out: dict[str, list] = {key: [] for key in OUTPUT_COLUMNS}
    pos = 0
    for sample, turns in zip(samples, rendered):
        turn_ids = []
        for _ in turns:
            turn_ids.append((ids[pos], ids[pos + 1]))
            pos += 2
        example = build_example(turn_ids, ctx, head_for(sample, ctx, zip(turns, turn_ids)))
        example["_source"] = sample["_source"]
        for key in OUTPUT_COLUMNS:
            out[key].append(example[key])
    return out
