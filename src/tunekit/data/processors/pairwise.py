"""Preference pairs (stages rm, dpo): one prompt, a chosen and a rejected answer.

Both answers are rendered after the *same* prompt tokens (the conversation up to the last user
message, rendered once, history as ``ProcessContext.render_turns`` decides for an untrained history)
and cut by the same policy: :func:`~.cutoff.fit_turns` runs on the conversation ending with the
*longer* answer, the last turn first (the oldest history is dropped first, BOS, system prompt and tools
stay), and both answers are then cut to the response length that left. So chosen and rejected always
share their prompt ids exactly and fit ``cutoff_len`` each.

Only answer tokens carry labels (the preference losses compare answer log-probabilities).
A pair is dropped (``_status`` DROPPED, counted and named in the report) when either answer is
empty or the two answers are identical after the cut.
"""

from __future__ import annotations

from typing import Any

from ..labels import IGNORE_INDEX
from ..message_content import is_empty_reply
from . import DROPPED, KEPT, TRUNCATED
from .context import ProcessContext
from .cutoff import Spans, fit_turns

OUTPUT_COLUMNS = (
    "chosen_input_ids",
    "chosen_labels",
    "rejected_input_ids",
    "rejected_labels",
    "length",
    "_status",
    "_source",
    "_prompt_len",
)


def render(sample: dict[str, Any], ctx: ProcessContext, reply: dict[str, str]) -> list[tuple[str, str]]:
    return ctx.render_turns(
        list(sample["messages"]) + [reply], sample.get("system"), sample.get("tools"), history_trained=False
    )


def spans_of(messages: list[dict[str, Any]], sample: dict[str, Any], ctx: ProcessContext) -> Spans:
    """The conversation's runs of turns rendered on their own (only the last reply is trained): what a cut keeps,
    never starting at a tool result."""
    return ctx.spans(messages, sample.get("system"), sample.get("tools"), history_trained=False)


def shared_prompt_cut(
    history: list[tuple[list[int], list[int]]],
    prompt: list[int],
    longest: list[int],
    cutoff_len: int,
    spans: Spans | None = None,
) -> tuple[list[int], int, bool]:
    """Prompt ids (kept history + last prompt, cut) and the response budget, via the common cutoff policy."""
    kept, truncated = fit_turns(history + [(prompt, longest)], cutoff_len, last_first=True, spans=spans)
    ids: list[int] = []
    budget = 0
    for i, (p, r) in kept:
        if i == len(history):
            ids += p
            budget = len(r)
        else:
            ids += p + r
    return ids, budget, truncated


def build_pair(
    history,
    prompt,
    chosen,
    rejected,
    ctx: ProcessContext,
    ignore: int = IGNORE_INDEX,
    spans: Spans | None = None,
) -> dict[str, Any]:
    longest = chosen if len(chosen) >= len(rejected) else rejected
    prompt_ids, budget, truncated = shared_prompt_cut(history, prompt, longest, ctx.cutoff_len, spans)
    c, r = chosen[:budget], rejected[:budget]
    bad = not c or not r or c == r
    return {
        "chosen_input_ids": prompt_ids + c,
        "chosen_labels": [ignore] * len(prompt_ids) + c,
        "rejected_input_ids": prompt_ids + r,
        "rejected_labels": [ignore] * len(prompt_ids) + r,
        "length": len(prompt_ids) + max(len(c), len(r)),
        "_prompt_len": len(prompt_ids),
        "_status": DROPPED if bad else (TRUNCATED if truncated else KEPT),
    }


def process(batch: dict[str, list], ctx: ProcessContext) -> dict[str, list]:
    n = len(batch["messages"])
    samples = [{key: batch[key][i] for key in batch} for i in range(n)]
    out: dict[str, list] = {key: [] for key in OUTPUT_COLUMNS}
    for sample in samples:
        turns_c = render(sample, ctx, sample["chosen"])
        turns_r = render(sample, ctx, sample["rejected"])
        pieces = [t for pair in turns_c for t in pair] + [turns_r[-1][1]]
        ids = ctx.encode_pieces(pieces)
        history = [(ids[2 * i], ids[2 * i + 1]) for i in range(len(turns_c) - 1)]
        prompt, chosen, rejected = ids[-3], ids[-2], ids[-1]
        if is_empty_reply(sample["chosen"]):
            chosen = []
        if is_empty_reply(sample["rejected"]):
            rejected = []
        spans = spans_of([*sample["messages"], sample["chosen"]], sample, ctx)
        example = build_pair(history, prompt, chosen, rejected, ctx, ctx.ignore_index, spans)
        example["_source"] = sample["_source"]
        for key in OUTPUT_COLUMNS:
            out[key].append(example[key])
    return out
