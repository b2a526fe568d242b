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
     stay in front of it and the ids are those of the shorter conversation, not a mangled one. A kept run
     never begins at a tool result (``Spans.can_start``): its call would be cut away, and gpt-oss's template
     cannot write a result without its call. When the last reply answers a tool result and its run from the
     call does not fit whole, the sample keeps nothing to train and is reported dropped.
   * SFT, which trains every reply: the first turn onwards; a later turn that does not fit is dropped
     with everything after it (the first turn, which holds BOS, always stays). The kept turns are the
     template's rendering of the kept messages (``Spans.turns(0, i)``), so a system prompt the family
     places in the *last* user message (Mistral's ``[INST]``) moves into the last kept one and survives.

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

In one sentence: what is kept is always the template's rendering of a contiguous run of turns (``Spans``,
rendered by ``ProcessContext.spans`` for a template), at most one of them cut inside by steps 2-3; so
wherever a family writes its system prompt (its own block, the first user message as Gemma and Llama 2
do, the last user message as Mistral does), it is part of the lead of the turn that may be cut.

Without a template (a plain list of turns), nothing is known about the lead: the first prompt keeps its
end, as the assistant header must stay next to the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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


class Spans:
    """The turns ``start..stop`` of a conversation rendered as a conversation of their own: what a cut keeps.

    This base splices the given ``turns``: the first prompt is ``first_prompt(start)`` (the rendering from
    ``start`` on), the others as given; without ``first_prompt`` nothing is known about the lead.
    ``ProcessContext.spans`` renders the kept messages with the template instead, which differs where a
    family writes the system prompt into the last user message or ends the last reply with its own stop.
    """

    def __init__(self, turns: list[Turn], first_prompt: Callable[[int], Head] | None = None):
        self._turns = turns
        self._first = first_prompt or (lambda j: Head(turns[j][0], lead=0, tail=len(turns[j][0]), keep=0))

    def head(self, start: int, stop: int) -> Head:
        """The first prompt of turns ``start..stop`` (BOS, system, tools, the first user message)."""
        return self._first(start)

    def can_start(self, start: int) -> bool:
        """Whether a kept run may begin at turn ``start`` (not at a tool result: its call would be cut away)."""
        return True

    def turns(self, start: int, stop: int) -> list[Turn]:
        """``(prompt_ids, response_ids)`` of turns ``start..stop``."""
        if start == 0:
            return self._turns[: stop + 1]
        return [(self.head(start, stop).ids, self._turns[start][1])] + self._turns[start + 1 : stop + 1]


def cut_turn(head: Head, response: list[int], budget: int) -> Turn:
    """Cut one turn (its prompt rendered as the conversation's start) to ``budget`` tokens; see the module doc."""
    ids, n_resp = head.ids, len(response)
    p = len(ids)
    lead = min(head.lead, p)
    tail = min(head.tail, p - lead)
    if lead + tail + min(n_resp, 1) <= budget:
        body = ids[lead : p - tail]
        p_len = max(lead + tail, min(p, max(budget - n_resp, budget // 2)))
        b_len = p_len - lead - tail
        front, back = b_len - b_len // 2, b_len // 2
        prompt = ids[:lead] + body[:front] + body[len(body) - back :] + ids[p - tail :]
        return prompt, response[: min(n_resp, budget - p_len)]
    keep = max(0, min(head.keep, p, budget - 2))
    room = budget - keep
    p_len = min(p - keep, max(room - n_resp, room // 2))
    prompt = ids[:keep] + (ids[p - p_len :] if p_len else [])
    return prompt, response[: min(n_resp, room - p_len)]


def fit_turns(
    turns: list[Turn],
    cutoff_len: int,
    last_first: bool = False,
    spans: Spans | None = None,
) -> tuple[list[tuple[int, Turn]], bool]:
    """Return the kept ``(turn_index, (prompt_ids, response_ids))`` in conversation order, and whether anything was
    cut. ``spans``: the conversation's runs of turns rendered on their own (without: nothing is known about the
    lead).
    """
    n = len(turns)
    if sum(len(p) + len(r) for p, r in turns) <= cutoff_len:
        return list(enumerate(turns)), False
    spans = spans or Spans(turns)
    if not last_first:
        return _fit_from_start(turns, cutoff_len, spans), True
    last = n - 1
    start = next((j for j in range(last, -1, -1) if spans.can_start(j)), last)
    rest = sum(len(p) + len(r) for p, r in turns[start + 1 :])  # the whole turns after ``start``
    head = spans.head(start, last)
    if len(head.ids) + len(turns[start][1]) + rest > cutoff_len:
        if start < last:  # a tool result's run does not fit whole: nothing of it is trained (reported dropped)
            return [], True
        return [(last, cut_turn(head, turns[last][1], cutoff_len))], True
    # the later turns of a rendering from turn j on are those of the whole conversation: only the head changes
    first, first_head = start, head
    for j in range(start - 1, -1, -1):
        rest += len(turns[j + 1][0]) + len(turns[j + 1][1])  # turn j+1 is no longer the start
        if len(turns[j][1]) + rest > cutoff_len:
            break
        if not spans.can_start(j):
            continue
        head_j = spans.head(j, last)
        if len(head_j.ids) + len(turns[j][1]) + rest > cutoff_len:
            break
        first, first_head = j, head_j
    kept = [(first, (first_head.ids, turns[first][1]))] + [(k, turns[k]) for k in range(first + 1, n)]
    return kept, True


def _fit_from_start(turns: list[Turn], cutoff_len: int, spans: Spans) -> list[tuple[int, Turn]]:
    """SFT order: the longest run of turns ``0..i`` whose own rendering fits, else the first turn alone, cut."""
    kept: list[Turn] = []
    for i in range(len(turns)):  # stops at the first run that does not fit: len(kept) + 1 renderings
        run = spans.turns(0, i)
        if sum(len(p) + len(r) for p, r in run) > cutoff_len:
            break
        kept = run
    if not kept:
        ((_, response),) = spans.turns(0, 0)
        return [(0, cut_turn(spans.head(0, 0), response, cutoff_len))]
    return list(enumerate(kept))
