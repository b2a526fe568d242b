"""The cutoff policy: make a conversation fit ``cutoff_len`` tokens, keeping as much answer as possible.

Turns are ``(prompt_ids, response_ids)`` pairs. They are taken in *priority order* — first turn
onwards normally, last turn backwards with ``mask_history`` (the trained turn comes first) — and
kept whole while they fit. The first turn in priority order that does not fit is cut:

* its prompt keeps ``min(P, max(B - R, B // 2))`` tokens — all of the budget the answer does not need,
  but never less than half when both are long — taken from the *end* of the prompt, so the
  assistant header (and the most recent context) stays next to the answer;
* its response keeps the rest from the *start* (the answer's beginning is what the model learns).

Only that first turn may be cut; a later turn that does not fit is dropped with everything after
it, so kept history is never mangled. A turn cut this way still has at least one response token
(``cutoff_len >= 2``), so truncation never leaves a sample with zero trainable tokens; the caller
drops a sample whose result has none (e.g. an empty answer) and counts it.
"""

from __future__ import annotations

Turn = tuple[list[int], list[int]]


def fit_turns(turns: list[Turn], cutoff_len: int, last_first: bool = False) -> tuple[list[tuple[int, Turn]], bool]:
    """Return the kept ``(turn_index, (prompt_ids, response_ids))`` in conversation order, and whether anything was cut."""
    order = list(range(len(turns)))
    if last_first:
        order.reverse()
    budget = cutoff_len
    kept: list[tuple[int, Turn]] = []
    truncated = False
    for rank, i in enumerate(order):
        prompt, response = turns[i]
        need = len(prompt) + len(response)
        if need <= budget:
            kept.append((i, (prompt, response)))
            budget -= need
            continue
        truncated = True
        if rank == 0:
            p_len = min(len(prompt), max(budget - len(response), budget // 2))
            r_len = min(len(response), budget - p_len)
            kept.append((i, (prompt[len(prompt) - p_len:] if p_len else [], response[:r_len])))
        break
    kept.sort(key=lambda item: item[0])
    return kept, truncated
