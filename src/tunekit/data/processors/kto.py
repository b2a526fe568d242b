"""KTO examples: a conversation whose last reply is labelled desirable (``kto_tag`` true) or undesirable.

The last turn is kept first when cutting (history goes before the answer), only the last reply
carries labels. ``prompt_ids``/``response_ids`` are kept separately so the trainer can build the
mismatched (prompt i, answer j) pairs of KTO's KL estimate without re-tokenizing.
"""

from __future__ import annotations

from typing import Any

from . import DROPPED, KEPT, TRUNCATED
from .context import ProcessContext
from .pairwise import shared_prompt_cut
from .sft import encode_conversation

OUTPUT_COLUMNS = ("input_ids", "labels", "prompt_ids", "response_ids", "kto_tag", "length", "_status", "_source", "_prompt_len")


def build_example(turn_ids: list[tuple[list[int], list[int]]], tag: bool, ctx: ProcessContext) -> dict[str, Any]:
    history, (prompt, response) = turn_ids[:-1], turn_ids[-1]
    prompt_ids, budget, truncated = shared_prompt_cut(history, prompt, response, ctx.cutoff_len)
    resp = response[:budget]
    return {
        "input_ids": prompt_ids + resp, "labels": [ctx.ignore_index] * len(prompt_ids) + resp,
        "prompt_ids": prompt_ids, "response_ids": resp, "kto_tag": bool(tag), "length": len(prompt_ids) + len(resp),
        "_prompt_len": len(prompt_ids), "_status": DROPPED if not resp else (TRUNCATED if truncated else KEPT),
    }


def process(batch: dict[str, list], ctx: ProcessContext) -> dict[str, list]:
    n = len(batch["messages"])
    samples = [{key: batch[key][i] for key in batch} for i in range(n)]
    rendered = [encode_conversation({**s, "messages": s["messages"]}, ctx) for s in samples]
    ids = ctx.encode_pieces([text for turns in rendered for pair in turns for text in pair])
    out: dict[str, list] = {key: [] for key in OUTPUT_COLUMNS}
    pos = 0
    for sample, turns in zip(samples, rendered):
        turn_ids = [(ids[pos + 2 * i], ids[pos + 2 * i + 1]) for i in range(len(turns))]
        pos += 2 * len(turns)
        example = build_example(turn_ids, sample["kto_tag"], ctx)
        example["_source"] = sample["_source"]
        for key in OUTPUT_COLUMNS:
            out[key].append(example[key])
    return out
