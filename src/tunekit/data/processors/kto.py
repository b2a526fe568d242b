"""KTO examples: a conversation whose last reply is labelled desirable (``kto_tag`` true) or undesirable.

The last turn is kept first when cutting (the oldest history goes first, BOS, system prompt and tools
stay: ``cutoff.py``), only the last reply carries labels, so history renders as for dpo/rm
(``ProcessContext.render_turns`` with an untrained history: no empty ``<think>`` blocks under qwen3).
``prompt_ids``/``response_ids`` are kept separately so the trainer can build the mismatched
(prompt i, answer j) pairs of KTO's KL estimate without re-tokenizing.
"""

from __future__ import annotations

from typing import Any

from . import DROPPED, KEPT, TRUNCATED
from .context import ProcessContext
from .cutoff import Spans
from .pairwise import shared_prompt_cut, spans_of

OUTPUT_COLUMNS = (
    "input_ids",
    "labels",
    "prompt_ids",
    "response_ids",
    "kto_tag",
    "length",
    "_status",
    "_source",
    "_prompt_len",
)


def build_example(
    turn_ids: list[tuple[list[int], list[int]]],
    tag: bool,
    ctx: ProcessContext,
    spans: Spans | None = None,
) -> dict[str, Any]:
    history, (prompt, response) = turn_ids[:-1], turn_ids[-1]
    prompt_ids, budget, truncated = shared_prompt_cut(history, prompt, response, ctx.cutoff_len, spans)
    resp = response[:budget]
    return {
        "input_ids": prompt_ids + resp,
        "labels": [ctx.ignore_index] * len(prompt_ids) + resp,
        "prompt_ids": prompt_ids,
        "response_ids": resp,
        "kto_tag": bool(tag),
        "length": len(prompt_ids) + len(resp),
        "_prompt_len": len(prompt_ids),
        "_status": DROPPED if not resp else (TRUNCATED if truncated else KEPT),
    }


def process(batch: dict[str, list], ctx: ProcessContext) -> dict[str, list]:
    n = len(batch["messages"])
    samples = [{key: batch[key][i] for key in batch} for i in range(n)]
    rendered = [
        ctx.render_turns(s["messages"], s.get("system"), s.get("tools"), history_trained=False) for s in samples
    ]
    ids = ctx.encode_pieces([text for turns in rendered for pair in turns for text in pair])
    out: dict[str, list] = {key: [] for key in OUTPUT_COLUMNS}
    pos = 0
    for sample, turns in zip(samples, rendered):
        turn_ids = [(ids[pos + 2 * i], ids[pos + 2 * i + 1]) for i in range(len(turns))]
        pos += 2 * len(turns)
        example = build_example(turn_ids, sample["kto_tag"], ctx, spans_of(sample["messages"], sample, ctx))
        example["_source"] = sample["_source"]
        for key in OUTPUT_COLUMNS:
            out[key].append(example[key])
    return out
