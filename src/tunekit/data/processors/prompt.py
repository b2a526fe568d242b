"""Prompt-only samples (stages ppo, grpo): the generation prompt the policy answers during rollouts.

The prompt is rendered exactly as inference renders it (``Template.render_prompt``) and, if longer
than ``cutoff_len``, its *end* is kept (the assistant header must stay). A reference answer, when the
record has one, is kept as text for reward functions (``reference``).
"""

from __future__ import annotations

from . import KEPT, TRUNCATED
from .context import ProcessContext

OUTPUT_COLUMNS = ("input_ids", "prompt_text", "reference", "length", "_status", "_source")


def process(batch: dict[str, list], ctx: ProcessContext) -> dict[str, list]:
    n = len(batch["messages"])
    texts = [ctx.template.render_prompt(batch["messages"][i], system=ctx.system_for(batch["system"][i]),
                                        tools=batch["tools"][i] or None, enable_thinking=ctx.enable_thinking) for i in range(n)]
    ids = ctx.encode_pieces(texts)
    out: dict[str, list] = {key: [] for key in OUTPUT_COLUMNS}
    for i in range(n):
        x = ids[i][-ctx.cutoff_len:]
        chosen = batch["chosen"][i]
        out["input_ids"].append(x)
        out["prompt_text"].append(texts[i])
        out["reference"].append((chosen or {}).get("content", "") if isinstance(chosen, dict) else "")
        out["length"].append(len(x))
        out["_status"].append(TRUNCATED if len(ids[i]) > ctx.cutoff_len else KEPT)
        out["_source"].append(batch["_source"][i])
    return out
