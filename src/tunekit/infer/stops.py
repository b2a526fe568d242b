"""Text-level stop strings (OpenAI ``stop``): cut at the first match, never emit it. The one place stops are applied.

Token-level stops (the template's stop words that are single tokens) end ``generate`` directly; :class:`StopText`
handles stop strings that span several tokens or sit inside one, holding back the tail of the text that could still
become a stop string.

:class:`ReplyStops` applies them to a reply as the user sees it (docs/reasoning.md, "Stop strings"): the template's
own multi-token stop words end the raw reply (they end the turn wherever they appear), while the **user's** stop
strings end the *visible answer* only: they are matched against the answer's text after the reply is split into
thought and answer (:mod:`tunekit.infer.reasoning`), never against a reasoning model's thought or gpt-oss's channel
markup. A stop word the model writes while it thinks does not end the reply; the first one in the answer does. This
is the semantics of vLLM's reasoning outputs (its OpenAI server skipped ``stop`` in reasoning content, vllm-project/
vllm#14550; its later engine's detokenizer matches the whole output, an open bug, vllm-project/vllm#38499) and of
hosted APIs, which scope stop sequences to the content.
"""

from __future__ import annotations

from .reasoning import ANSWER, Part, held_back


class StopText:
    """Feed the full decoded text; ``emit`` returns the part that is safe to show now."""

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.sent = 0
        self.hit = False

    def emit(self, text: str, final: bool = False) -> str:
        if self.hit:
            return ""
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.hit = True
            end = cut
        else:
            end = len(text) if final else len(text) - held_back(text, self.stops)
        if end <= self.sent:
            return ""
        out, self.sent = text[self.sent : end], end
        return out


class ReplyStops:
    """A reply's decoded text (the whole of it so far, at each step) → its ``(kind, text)`` parts with the stops
    applied (module docstring): ``template_stops`` on the raw text, ``user_stops`` on the answer's text. ``splitter``:
    the reply's splitter (:func:`tunekit.infer.reasoning.reply_splitter`). ``hit``: a stop ended the reply."""

    def __init__(self, splitter, user_stops: list[str], template_stops: list[str]):
        self.splitter = splitter
        self.raw = StopText(template_stops)
        self.answer = StopText(user_stops)
        self.answer_text = ""

    @property
    def hit(self) -> bool:
        return self.raw.hit or self.answer.hit

    def feed(self, text: str, final: bool = False) -> list[Part]:
        """The new parts of ``text`` (the reply decoded so far); ``final``: the reply ended (everything held back is
        shown, unless it is the start of a stop string that never came)."""
        if self.hit:
            return []
        delta = self.raw.emit(text, final)
        parts = self.splitter.feed(delta) if delta else []
        ended = final or self.raw.hit
        if ended:
            parts += self.splitter.close()
        out: list[Part] = []
        for kind, piece in parts:
            if kind != ANSWER:
                out.append((kind, piece))
                continue
            self.answer_text += piece
            shown = self.answer.emit(self.answer_text)
            if shown:
                out.append((ANSWER, shown))
            if self.answer.hit:
                return out
        if ended:
            rest = self.answer.emit(self.answer_text, final=True)
            if rest:
                out.append((ANSWER, rest))
        return out
