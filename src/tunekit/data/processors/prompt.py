"""Prompt-only samples (stages ppo, grpo): the generation prompt the policy answers during rollouts.

The prompt is rendered exactly as inference renders it (``Template.render_prompt``). One longer than
``cutoff_len`` is cut by the common policy (``cutoff.py``) with no answer to keep: the oldest history
turns go first (the prompt is then rendered from the first kept turn on, so BOS, the system prompt and
the tools stay), then the middle of the one user message left; the assistant header always stays. What is
kept never begins at a tool result: a prompt that ends with one keeps the run from its call's question whole,
or is dropped (and reported).
A reference answer, when the record has one, is kept as text for reward functions (``reference``).
"""

from __future__ import annotations

from . import DROPPED, KEPT, TRUNCATED
from .context import ProcessContext
from .cutoff import cut_turn

OUTPUT_COLUMNS = ("input_ids", "prompt_text", "reference", "length", "_status", "_source")


def _render(ctx: ProcessContext, messages, system, tools) -> str:
    return ctx.template.render_prompt(
        messages,
        system=ctx.system_for(system),
        tools=tools or None,
        enable_thinking=ctx.enable_thinking,
        preserve_thinking=ctx.preserve_thinking,
    )


def fit_prompt(ctx: ProcessContext, messages, system, tools) -> list[int] | None:
    """The whole prompt cut to ``cutoff_len``: whole history turns first, oldest first, then the user text; ``None``
    when what is left must start at a tool result (its call would be cut away) and the run from that call's question
    does not fit whole."""
    starts = [s for s in range(0, len(messages), 2) if messages[s]["role"] != "observation"]
    for start in starts[1:]:
        shorter = ctx.encode_pieces([_render(ctx, messages[start:], system, tools)])[0]
        if len(shorter) <= ctx.cutoff_len:
            return shorter
    if starts[-1] != len(messages) - 1:
        return None
    last = messages[-1:]  # its rendering alone did not fit either: cut the middle of its user text
    head = ctx.head_of_text(_render(ctx, last, system, tools), last[0]["content"])
    return cut_turn(head, [], ctx.cutoff_len)[0]


def process(batch: dict[str, list], ctx: ProcessContext) -> dict[str, list]:
    n = len(batch["messages"])
    texts = [_render(ctx, batch["messages"][i], batch["system"][i], batch["tools"][i]) for i in range(n)]
    ids = ctx.encode_pieces(texts)
    out: dict[str, list] = {key: [] for key in OUTPUT_COLUMNS}
    for i in range(n):
        cut = len(ids[i]) > ctx.cutoff_len
        x = fit_prompt(ctx, batch["messages"][i], batch["system"][i], batch["tools"][i]) if cut else ids[i]
        chosen = batch["chosen"][i]
        out["input_ids"].append(x or [])
        out["prompt_text"].append(texts[i])
        out["reference"].append((chosen or {}).get("content", "") if isinstance(chosen, dict) else "")
        out["length"].append(len(x or []))
        out["_status"].append(DROPPED if x is None else TRUNCATED if cut else KEPT)
        out["_source"].append(batch["_source"][i])
    return out
