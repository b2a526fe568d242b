"""Text-level stop strings for streamed output (OpenAI ``stop``): cut at the first match, never emit it.

Token-level stops (the template's stop words that are single tokens) end ``generate`` directly; this
handles stop strings that span several tokens or sit inside one, holding back the tail of the text
that could still become a stop string.
"""

from __future__ import annotations


class StopText:
    """Feed the full decoded text; ``emit`` returns the part that is safe to show now."""

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.sent = 0
        self.hit = False

    def _safe_end(self, text: str) -> int:
        """Length of ``text`` that cannot be the start of a stop string."""
        keep = 0
        for stop in self.stops:
            for k in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:k]):
                    keep = max(keep, k)
                    break
        return len(text) - keep

    def emit(self, text: str, final: bool = False) -> str:
        if self.hit:
            return ""
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.hit = True
            end = cut
        else:
            end = len(text) if final else self._safe_end(text)
        if end <= self.sent:
            return ""
        out, self.sent = text[self.sent : end], end
        return out
