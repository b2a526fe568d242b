"""What a request must get through before it generates, so that no single client stalls the others.

* its body: refused by byte size before it is parsed (``max_body_bytes``, :func:`default_body_bytes`);
* its text: refused, before any tokenizing, when it cannot fit the context (:func:`check_prompt_size`: a token
  covers at most as many characters as the tokenizer's longest token);
* a *place* (:class:`Places`): ``1 + api_max_queue`` requests are served at once, their generations taking turns
  on the model token by token (:mod:`tunekit.infer.turns`), so a request with a long reply or many choices only
  slows the others down, it never blocks them; a request that finds every place taken waits for one at most
  ``api_queue_timeout`` seconds (at most ``api_max_queue`` requests wait), else 429 with ``Retry-After``. (A
  composite model, whose generations cannot interleave, has one place: one request generates at a time);
* its prompt is then rendered and tokenized in a worker thread (:func:`render_prompt`), never on the event loop.
"""

from __future__ import annotations

import math
from typing import Any

import anyio

from .media import render_with_media, sources_of
from .request_checks import APIError

#: the body limit (bytes) when the server is not told one: 32 bytes per context token, at least 1 MiB; 4 MiB when
#: the model does not say its context (JSON-escaped CJK text takes about 9 bytes a token, English about 5)
BYTES_PER_TOKEN, MIN_BODY, NO_CONTEXT_BODY = 32, 2**20, 4 * 2**20


def default_body_bytes(context_length: int | None) -> int:
    return max(MIN_BODY, BYTES_PER_TOKEN * context_length) if context_length else NO_CONTEXT_BODY


class Places:
    """``1 + max_queue`` requests are served at once; more wait (bounded in number and in time), then 429. With
    ``interleaved=False`` (a model whose generations cannot take turns: ``ChatEngine.interleaves``) one place."""

    def __init__(self, limits, interleaved: bool = True) -> None:
        self.limits = limits
        self.size = 1 + limits.max_queue if interleaved else 1
        self.waiting = 0
        self._sem = None

    async def acquire(self) -> None:
        if self._sem is None:
            self._sem = anyio.Semaphore(self.size)
        try:  # free: take it without a checkpoint (with api_queue_timeout 0 a timed wait would never get it)
            self._sem.acquire_nowait()
            return
        except anyio.WouldBlock:
            pass
        if self.waiting >= self.limits.max_queue:
            raise self._busy(
                f"{self.waiting} more request(s) are already waiting (api_max_queue: {self.limits.max_queue})"
            )
        self.waiting += 1
        try:
            with anyio.move_on_after(self.limits.queue_timeout):
                await self._sem.acquire()
                return
        finally:
            self.waiting -= 1
        raise self._busy(f"no place came free for {self.limits.queue_timeout:g} s (api_queue_timeout)")

    def release(self) -> None:
        self._sem.release()

    def _busy(self, why: str) -> APIError:
        at_once = f"{self.size} requests at once (1 + api_max_queue)" if self.size > 1 else "one request at a time"
        err = APIError(
            429,
            f"The server is busy: it serves {at_once} and {why}; retry later.",
            type_="rate_limit_error",
            code="server_busy",
        )
        err.headers = {"Retry-After": str(max(1, math.ceil(self.limits.queue_timeout)))}
        return err


def _chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content.strip())
    return sum(len(p.strip()) for p in content or () if isinstance(p, str))


def check_prompt_size(engine, turns: list[dict], system: str | None) -> None:
    """400 without tokenizing when the client's text (user and tool messages, system text: what every template
    writes out whole) has more characters than the context can hold, ``context × the longest token``."""
    ctx = engine.context_length
    per_token = getattr(engine, "most_chars_per_token", None)
    if ctx is None or not per_token:
        return
    chars = _chars(system) + sum(_chars(t["content"]) for t in turns if t["role"] in ("user", "observation"))
    if chars > ctx * per_token:
        raise APIError(
            400,
            f"The messages hold {chars:,} characters, more than the model's context of {ctx} tokens can "
            f"hold (at most {ctx * per_token:,}: this tokenizer's longest token has {per_token} characters); "
            f"shorten the messages.",
            param="messages",
            code="context_length_exceeded",
        )


def render_prompt(engine, limits, turns: list[dict], system: str | None, tools: Any) -> tuple[list[int], dict]:
    """Prompt ids (and media inputs) of the conversation; blocking CPU work: run it in a worker thread."""
    if sources_of(turns):
        return render_with_media(engine, limits.media, turns, system, tools, limits.parse_special_tokens)
    return engine.render(turns, system=system, tools=tools, parse_special_tokens=limits.parse_special_tokens), {}
