"""Generations take turns on one model: first come, first served, and a running generation hands its turn on
every :data:`QUANTUM` tokens while others wait (:class:`Turns`, ``ChatEngine.lock``).

So one long generation (or a request with many choices) cannot hold the model while others wait: concurrent
generations interleave token by token and a short one finishes after a few rounds, whatever runs beside it.
Each generation keeps its own KV cache, and its own random state (saved when it hands its turn on, restored when
its turn comes back), so its tokens are exactly those it generates alone (greedy or seeded sampling).

``with turns:`` holds one whole turn (batched generation in ``predict``), handing nothing on.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

#: tokens a generation generates per turn while others wait
QUANTUM = 4
#: how often a waiting generation checks whether it was cancelled (seconds; no signal-unsafe wake-up needed)
_POLL = 0.1


def _never() -> bool:
    return False


class Turns:
    """A fair (FIFO) turn for generations on one model; ``who`` is any object naming the holder."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque = deque()
        self._holder: Any = None
        self._local = threading.local()

    def acquire(self, who: Any, cancelled: Callable[[], bool] = _never) -> bool:
        """Wait for ``who``'s turn (after everyone already waiting); False when ``cancelled()`` turns true first."""
        with self._cond:
            self._queue.append(who)
            try:
                while not (self._holder is None and self._queue[0] is who):
                    if cancelled():
                        return False
                    self._cond.wait(_POLL)
                self._holder = who
                return True
            finally:
                self._queue.remove(who)
                self._cond.notify_all()

    def release(self, who: Any) -> None:
        """End ``who``'s turn (nothing when it does not hold it)."""
        with self._cond:
            if self._holder is who:
                self._holder = None
                self._cond.notify_all()

    def waiting(self) -> int:
        with self._cond:
            return len(self._queue)

    def share(self, who: Any, cancelled: Callable[[], bool] = _never) -> bool:
        """Let everyone waiting go first, then take the turn back; False when cancelled meanwhile (turn not held)."""
        with self._cond:
            if not self._queue or self._holder is not who:
                return self._holder is who
            self._holder = None
            self._cond.notify_all()
        return self.acquire(who, cancelled)

    def locked(self) -> bool:
        return self._holder is not None

    def __enter__(self) -> Turns:
        self._local.token = object()
        self.acquire(self._local.token)
        return self

    def __exit__(self, *exc) -> None:
        self.release(self._local.token)


class RandomState:
    """torch's global random state (the CPU's and every initialized CUDA device's: a model split across GPUs samples
    on its last one), to carry across a handed-on turn."""

    def __init__(self) -> None:
        import torch

        self.cpu = torch.get_rng_state()
        self.cuda = (
            torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        )

    def restore(self) -> None:
        import torch

        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
