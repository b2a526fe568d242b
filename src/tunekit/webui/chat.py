"""The Chat tab's model: ``tunekit.infer.engine.ChatEngine``, the same engine as ``tunekit chat`` and
``tunekit api`` (same template rendering, stop words and generation options)."""

from __future__ import annotations

import threading
from typing import Any, Iterator


def engine_class():
    from tunekit.infer.engine import ChatEngine

    return ChatEngine


class ChatSession:
    """One loaded model per board (loading is slow; every page shares it)."""

    def __init__(self) -> None:
        self.engine = None
        self.description = ""
        self._lock = threading.Lock()

    def load(self, cfg) -> str:
        with self._lock:
            self.engine = None
            self.engine = engine_class()(cfg)
            adapter = f" + {cfg.adapter_name_or_path}" if cfg.adapter_name_or_path else ""
            self.description = f"{cfg.model_name_or_path}{adapter}"
            return self.description

    def unload(self) -> None:
        with self._lock:
            self.engine = None
            self.description = ""
            import gc

            gc.collect()

    @property
    def loaded(self) -> bool:
        return self.engine is not None

    def stream(self, messages: list[dict[str, str]], system: str | None, **gen: Any) -> Iterator[str]:
        if self.engine is None:
            raise RuntimeError("no model loaded")
        yield from self.engine.stream_chat(messages, system=system or None, **gen)
