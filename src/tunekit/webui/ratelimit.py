"""A rate limit on the board's ``/login``: after ``max_failures`` wrong passwords from one client within
``window_s`` seconds, further attempts from it get ``429 Too Many Requests`` (with ``Retry-After``) until
the oldest failure leaves the window. The client is the connecting address (behind a reverse proxy every
user shares the proxy's address, so they share the limit).

A plain ASGI middleware, given to Gradio's FastAPI app through ``launch(app_kwargs={"middleware": ...})``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict, deque
from typing import Any, Callable

MAX_FAILURES = 5
WINDOW_S = 60.0


class LoginRateLimit:
    def __init__(self, app, max_failures: int = MAX_FAILURES, window_s: float = WINDOW_S,
                 clock: Callable[[], float] = time.monotonic):
        self.app = app
        self.max_failures = max_failures
        self.window_s = window_s
        self.clock = clock
        self._failures: dict[str, deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    @staticmethod
    def _is_login(scope) -> bool:
        path = scope.get("path", "").rstrip("/")
        return scope.get("type") == "http" and scope.get("method") == "POST" and path.endswith("/login")

    def retry_after(self, client: str) -> float:
        """Seconds until ``client`` may try again (0: it may now)."""
        with self._lock:
            now = self.clock()
            q = self._failures[client]
            while q and now - q[0] >= self.window_s:
                q.popleft()
            return self.window_s - (now - q[0]) if len(q) >= self.max_failures else 0.0

    def record_failure(self, client: str) -> None:
        with self._lock:
            self._failures[client].append(self.clock())

    async def __call__(self, scope, receive, send) -> None:
        if not self._is_login(scope):
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("?", 0))[0]
        wait = self.retry_after(client)
        if wait > 0:
            await _send_json(send, 429, {"detail": f"Too many failed logins from {client}: try again in "
                                                   f"{int(wait) + 1} s."}, {"retry-after": str(int(wait) + 1)})
            return
        status: dict[str, Any] = {}

        async def watch(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        await self.app(scope, receive, watch)
        if status.get("code") in (400, 401, 403):  # Gradio answers a wrong password with 400
            self.record_failure(client)


async def _send_json(send, code: int, body: dict, headers: dict[str, str]) -> None:
    data = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": code, "headers": raw})
    await send({"type": "http.response.body", "body": data})
