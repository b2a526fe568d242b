"""The cutoff policy: make a conversation fit ``cutoff_len`` tokens without losing what frames it.

Turns are ``(prompt_ids, response_ids)`` pairs. The first prompt of a conversation holds its *lead* — BOS
(or the template's prefix such as ``[gMASK]sop``), the system prompt, the tool definitions and the first
user header — then the user text, then its *tail* (the end of the user message and the assistant header).
What is cut, in this order:

1. **Whole turns.** Turns are taken in *priority order* and kept whole while they fit.

   * Stages that train only the last reply (``mask_history``, ``dpo``/``rm``, ``kto``): the last turn
     first, then the history from the newest turn back, so the **oldest history goes first**. When history
     is dropped, the first kept turn is rendered as the conversation's start (``first_prompt(j)``: the
     template's rendering of the messages from turn ``j`` on), so BOS, the system prompt and the tools
     stay in front of it and the ids are those of the shorter conversation, not a mangled one.
   * SFT, which trains every reply: the first turn onwards; a later turn that does not fit is dropped
     with everything after it (the first turn, which holds BOS and the system prompt, always stays).

   Kept history is never cut inside: only the one turn described next may be.
2. **The middle of the user text.** If the top-priority turn alone (rendered as the start) does not fit
   the budget ``B``, its prompt (``P`` tokens) keeps ``min(P, max(B - R, B // 2))`` tokens (``R`` answer
   tokens) — all of the budget the answer does not need, but never less than half when both are long —
   and at least its whole lead and tail: those, plus the user text's start and end (its middle is
   removed: instructions usually open a message and the question ends it).
3. **The answer's tail.** The answer keeps the rest of the budget from its *start* (the beginning is
   what the model learns first).

If the lead and tail alone leave no room for one answer token (a system prompt or tool list longer than
``cutoff_len``), only the ``keep`` tokens (BOS / the template prefix) are kept from the start and the
rest of the budget is shared between the prompt's *end* and the answer's start as in step 2, so BOS
survives in every case. A cut turn still has at least one response token (``cutoff_len >= 2``), so
truncation never leaves a sample with zero trainable tokens; the caller drops a sample whose result has
none (e.g. an empty answer) and counts it. Every cut or dropped turn marks the sample truncated, and
``preprocessing_report.json`` names it.

Without ``first_prompt`` (a plain list of turns, no template), nothing is known about the lead: the
first prompt keeps its end, as the assistant header must stay next to the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

Turn = tuple[list[int], list[int]]


@dataclass(frozen=True)
class Head:
    """The first prompt of a conversation that starts at some turn, and which of its tokens a cut keeps."""

    ids: list[int]
    #: tokens before the user text: BOS/prefix, system prompt, tool definitions, the user header
    lead: int = 0
    #: tokens after the user text: end of the user message, the assistant header (and an empty <think> block)
    tail: int = 0
    #: tokens kept even when the lead does not fit: BOS or the template's prefix
    keep: int = 0


def _plain_head(turns: list[Turn]) -> Callable[[int], Head]:
    return lambda j: Head(turns[j][0], lead=0, tail=len(turns[j][0]), keep=0)


def cut_turn(head: Head, response: list[int], budget: int) -> Turn:
    """Cut one turn (its prompt rendered as the conversation's start) to ``budget`` tokens; see the module doc."""
    ids, n_resp = head.ids, len(response)
    p = len(ids)
    lead = min(head.lead, p)
    tail = min(head.tail, p - lead)
    if lead + tail + min(n_resp, 1) <= budget:
        body = ids[lead:p - tail]
        p_len = max(lead + tail, min(p, max(budget - n_resp, budget // 2)))
        b_len = p_len - lead - tail
        front, back = b_len - b_len // 2, b_len // 2
        prompt = ids[:lead] + body[:front] + body[len(body) - back:] + ids[p - tail:]
        return prompt, response[:min(n_resp, budget - p_len)]
    keep = max(0, min(head.keep, p, budget - 2))
    room = budget - keep
    p_len = min(p - keep, max(room - n_resp, room // 2))
    prompt = ids[:keep] + (ids[p - p_len:] if p_len else [])
    return prompt, response[:min(n_resp, room - p_len)]


def fit_turns(turns: list[Turn], cutoff_len: int, last_first: bool = False,
              first_prompt: Optional[Callable[[int], Head]] = None) -> tuple[list[tuple[int, Turn]], bool]:
    """Return the kept ``(turn_index, (prompt_ids, response_ids))`` in conversation order, and whether anything was cut.

    ``first_prompt(j)``: the :class:`Head` of the conversation rendered from turn ``j`` on (``j == 0``: the
    first prompt as it is). The first kept turn's prompt in the result is that head's ids.
    """
    n = len(turns)
    if sum(len(p) + len(r) for p, r in turns) <= cutoff_len:
        return list(enumerate(turns)), False
    head_of = first_prompt or _plain_head(turns)
    if not last_first:
        prompt, response = turns[0]
        if len(prompt) + len(response) > cutoff_len:
            return [(0, cut_turn(head_of(0), response, cutoff_len))], True
        kept = [(0, turns[0])]
        budget = cutoff_len - len(prompt) - len(response)
        for i in range(1, n):
            need = len(turns[i][0]) + len(turns[i][1])
            if need > budget:
                break
            kept.append((i, turns[i]))
            budget -= need
        return kept, True
    last = n - 1
    head = head_of(last)
    if len(head.ids) + len(turns[last][1]) > cutoff_len:
        return [(last, cut_turn(head, turns[last][1], cutoff_len))], True
    first, first_head, rest = last, head, 0  # rest: the whole turns after ``first``
    for j in range(last - 1, -1, -1):
        rest_j = rest + len(turns[j + 1][0]) + len(turns[j + 1][1])  # turn j+1 is no longer the start
        head_j = head_of(j)
        if len(head_j.ids) + len(turns[j][1]) + rest_j > cutoff_len:
            break
        first, first_head, rest = j, head_j, rest_j
    kept = [(first, (first_head.ids, turns[first][1]))] + [(k, turns[k]) for k in range(first + 1, n)]
    return kept, True
