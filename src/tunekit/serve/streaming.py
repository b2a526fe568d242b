"""Streaming a generation to a client: run it to its end in a worker thread while watching for a disconnect, and a
streamed response that gives the generation slot back however it ends (serve/app.py)."""

from __future__ import annotations

import contextlib

import anyio
from fastapi import Request
from fastapi.responses import StreamingResponse


def drain(generation) -> None:
    for _ in generation:
        pass


async def drain_watching(g, request: Request) -> None:
    """Run ``g`` to its end in a worker thread; cancel it when the client disconnects."""
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            while True:
                if await request.is_disconnected():
                    g.cancel()
                    return
                await anyio.sleep(0.2)

        tg.start_soon(watch)
        await anyio.to_thread.run_sync(drain, g)
        tg.cancel_scope.cancel()


class StalledClient(Exception):
    pass


class GuardedStream(StreamingResponse):
    """A stream that gives the slot back however it ends, and drops a client that stops reading."""

    def __init__(self, content, finish, write_timeout: float, **kw):
        super().__init__(content, **kw)
        self._finish, self._write_timeout = finish, write_timeout

    async def stream_response(self, send) -> None:
        async def timed_send(message) -> None:
            with anyio.move_on_after(self._write_timeout) as scope:
                await send(message)
            if scope.cancelled_caught:  # the client does not read: stop (the connection is closed by the server)
                raise StalledClient()

        with contextlib.suppress(StalledClient):
            await super().stream_response(timed_send)

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._finish()
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()
