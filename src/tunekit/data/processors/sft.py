"""Supervised fine-tuning: render with the template, tokenize, mask, cut.

Labels: only reply tokens (assistant content + the template's end-of-turn marker) are trained;
everything else is ``-100``. ``train_on_prompt`` trains every token; ``mask_history`` trains only the
last reply. Each template piece is tokenized on its own (no special tokens added), so the prompt
ids equal what inference tokenizes for the same conversation prefix. How history replies render is
decided by ``ProcessContext.render_turns`` (the same rule as dpo/rm/kto); cuts follow ``cutoff.py``.
"""

from __future__ import annotations

from typing import Any

from tunekit.config.problems import Said, message_of
from tunekit.errors import DataError

from ..readers import where_of
from . import DROPPED, KEPT, TRUNCATED
from .context import ProcessContext
from .cutoff import Spans, fit_turns

#: 1 on the tokens of a trained thought block, when ``thought_loss_weight`` is between 0 and 1 (else no such column)
THOUGHT_MASK = "thought_mask"
OUTPUT_COLUMNS = ("input_ids", "labels", "length", "_status", "_source", "_prompt_len", "_response_len", "_trainable")


def encode_conversation(sample: dict[str, Any], ctx: ProcessContext) -> list[tuple[str, str]]:
    return ctx.render_turns(
        sample["messages"], sample.get("system"), sample.get("tools"), history_trained=not ctx.mask_history
    )


def encode_marked(sample: dict[str, Any], ctx: ProcessContext) -> list[tuple[str, str, str]]:
    """Each turn's (prompt, response, thought head): ``thought_loss_weight`` below 1 needs the thought's extent.
    A record the template refuses is named in the error."""
    try:
        if ctx.thought_weight == 1:
            return [(p, r, "") for p, r in encode_conversation(sample, ctx)]
        return ctx.render_marked(
            sample["messages"], sample.get("system"), sample.get("tools"), history_trained=not ctx.mask_history
        )
    except DataError as exc:
        where = where_of(sample["_source"]) if "_source" in sample else Said("part_a_record")
        raise DataError(Said("record_template_refused", where=where, error=message_of(exc))) from None


def thought_lengths(response_ids: list[list[int]], head_ids: list[list[int] | None]) -> list[int]:
    """Tokens of each response that belong to its thought: the ids it shares with its thought head tokenized
    alone (a token spanning the thought's end and the answer's start, if a tokenizer made one, counts as answer)."""
    out = []
    for ids, head in zip(response_ids, head_ids):
        n = 0
        for a, b in zip(ids, head or ()):
            if a != b:
                break
            n += 1
        out.append(n)
    return out


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
    turn_ids: list[tuple[list[int], list[int]]],
    ctx: ProcessContext,
    spans: Spans | None = None,
    thoughts: list[int] | None = None,
) -> dict[str, Any]:
    """Cut and label one tokenized conversation. ``thoughts``: each response's leading thought tokens (a cut keeps a
    response's start, so they stay its first tokens): not trained with ``thought_loss_weight: 0``, marked 1 in the
    row's ``thought_mask`` for a weight between 0 and 1 (``train/thought_loss.py``)."""
    kept, truncated = fit_turns(turn_ids, ctx.cutoff_len, last_first=ctx.mask_history, spans=spans)
    last = len(turn_ids) - 1
    input_ids: list[int] = []
    labels: list[int] = []
    marks: list[int] = []
    for i, (prompt, response) in kept:
        input_ids += prompt + response
        labels += prompt if ctx.train_on_prompt else [ctx.ignore_index] * len(prompt)
        trained = not ctx.mask_history or i == last
        thought = min(thoughts[i], len(response)) if thoughts and trained else 0
        masked = thought if ctx.thought_weight == 0 else 0
        labels += [ctx.ignore_index] * masked + response[masked:] if trained else [ctx.ignore_index] * len(response)
        marks += [0] * len(prompt) + [1] * thought + [0] * (len(response) - thought)
    trainable = sum(1 for t in labels if t != ctx.ignore_index)
    status = DROPPED if trainable == 0 else (TRUNCATED if truncated else KEPT)
    weighted = {THOUGHT_MASK: marks} if 0 < ctx.thought_weight < 1 else {}
    return {
        **weighted,
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
    marked = [encode_marked(s, ctx) for s in samples]
    rendered = [[(p, r) for p, r, _ in turns] for turns in marked]
    pieces = [text for turns in rendered for pair in turns for text in pair]
    ids = ctx.encode_pieces(pieces)
    heads = [h for turns in marked for _, _, h in turns if h]
    head_ids = iter(ctx.encode_pieces(heads))
    columns = OUTPUT_COLUMNS + ((THOUGHT_MASK,) if 0 < ctx.thought_weight < 1 else ())
    out: dict[str, list] = {key: [] for key in columns}
    pos = 0
    for sample, turns, marks in zip(samples, rendered, marked):
        turn_ids = []
        for _ in turns:
            turn_ids.append((ids[pos], ids[pos + 1]))
            pos += 2
        thoughts = thought_lengths([r for _, r in turn_ids], [next(head_ids) if h else None for *_, h in marks])
        example = build_example(turn_ids, ctx, head_for(sample, ctx, zip(turns, turn_ids)), thoughts)
        example["_source"] = sample["_source"]
        for key in columns:
            out[key].append(example[key])
    return out
