"""A rate limit on the board's ``/login``: at most ``max_failures`` failed (or still running) attempts from one
client and ``global_max_failures`` from all clients together within ``window_s`` seconds; further attempts
get ``429 Too Many Requests`` (with ``Retry-After``) until the oldest one leaves the window.

- Attempts are counted *before* the password is checked, under one lock: an attempt takes a slot, and gives
  it back only when it succeeded. So parallel attempts cannot check more passwords than the limit.
- The client is the address of the connection (``scope["client"]``). The board starts its server trusting no
  ``X-Forwarded-For`` header (``FORWARDED_ALLOW_IPS`` empty, :func:`tunekit.webui.app.launch`) unless proxies
  are configured explicitly (``--trusted-proxy``): a client cannot pick the address it is counted under.
- The global cap bounds what many addresses together can try (and the memory the counters take).

A plain ASGI middleware, given to Gradio's FastAPI app through ``launch(app_kwargs={"middleware": ...})``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

MAX_FAILURES = 5  # per client and window
GLOBAL_MAX_FAILURES = 20  # all clients together, per window
WINDOW_S = 60.0
ALL = "*"  # the key of the global count


class LoginRateLimit:
    def __init__(
        self,
        app,
        max_failures: int = MAX_FAILURES,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        global_max_failures: int = GLOBAL_MAX_FAILURES,
    ):
        self.app = app
        self.max_failures = max_failures
        self.global_max_failures = global_max_failures
        self.window_s = window_s
        self.clock = clock
        self._attempts: dict[str, deque[float]] = {}  # key -> start times of failed or running attempts
        self._lock = threading.Lock()

    @staticmethod
    def _is_login(scope) -> bool:
        path = scope.get("path", "").rstrip("/")
        return scope.get("type") == "http" and scope.get("method") == "POST" and path.endswith("/login")

    def _queue(self, key: str, now: float) -> deque[float]:
        q = self._attempts.setdefault(key, deque())
        while q and now - q[0] >= self.window_s:
            q.popleft()
        return q

    def _wait(self, client: str, now: float) -> tuple[float, str]:
        """(seconds until ``client`` may try, who is limited: ``client`` or :data:`ALL`); 0 when it may now."""
        for key, cap in ((client, self.max_failures), (ALL, self.global_max_failures)):
            q = self._queue(key, now)
            if len(q) >= cap:
                return self.window_s - (now - q[0]), key
        return 0.0, client

    def retry_after(self, client: str) -> float:
        """Seconds until ``client`` may try again (0: it may now)."""
        with self._lock:
            wait, _ = self._wait(client, self.clock())
            self._forget_idle(client)
            return wait

    def acquire(self, client: str) -> tuple[float, str, float | None]:
        """Take an attempt's slot: ``(0, client, stamp)``, or ``(seconds to wait, who is limited, None)``."""
        with self._lock:
            now = self.clock()
            wait, who = self._wait(client, now)
            if wait > 0:
                self._forget_idle(client)
                return wait, who, None
            for key in (client, ALL):
                self._attempts[key].append(now)
            return 0.0, client, now

    def release(self, client: str, stamp: float) -> None:
        """Give back the slot of an attempt that succeeded."""
        with self._lock:
            for key in (client, ALL):
                q = self._attempts.get(key)
                if q is not None and stamp in q:
                    q.remove(stamp)
            self._forget_idle(client)

    def record_failure(self, client: str) -> None:
        with self._lock:
            now = self.clock()
            for key in (client, ALL):
                self._queue(key, now).append(now)

    def _forget_idle(self, client: str) -> None:
        if client != ALL and not self._attempts.get(client):
            self._attempts.pop(client, None)

    async def __call__(self, scope, receive, send) -> None:
        if not self._is_login(scope):
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("?", 0))[0]
        wait, who, stamp = self.acquire(client)
        if stamp is None:
            whom = "on this board" if who == ALL else f"from {client}"
            await _send_json(
                send,
                429,
                {"detail": f"Too many failed logins {whom}: try again in {int(wait) + 1} s."},
                {"retry-after": str(int(wait) + 1)},
            )
            return
        status: dict[str, Any] = {}

        async def watch(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if status.get("code", 500) < 400:  # Gradio answers a wrong password with 400: that slot stays taken
                self.release(client, stamp)


async def _send_json(send, code: int, body: dict, headers: dict[str, str]) -> None:
    data = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": code, "headers": raw})
    await send({"type": "http.response.body", "body": data})
