"""The Chat tab's model: ``tunekit.infer.engine.ChatEngine``, the same engine as ``tunekit chat`` and
``tunekit api`` (same template rendering, stop words and generation options).

Images: an image uploaded in the tab goes with the next message, exactly as ``tunekit chat --image`` /
``/image PATH`` does (``<image>`` at the start of that message; every image of the conversation stays in it and is
rendered by ``ChatEngine.render_media``). An upload is checked first, each problem answered in the chat in the
board's language: no model loaded, a text-only model, a file over :attr:`ChatSession.max_upload_bytes`, a file that
does not decode as an image. An accepted image is copied into the board's served folder (the one folder Gradio
may serve), so the chat can show it and the model reads the copy.

The conversation lives in a per-page :func:`new_conversation` dict (a ``gr.State``: kept on the server, so a
browser cannot point the model at another file): ``messages`` (what the model sees), ``images`` (their files, in
order) and ``shown`` (the Chatbot's messages, with the image bubbles and any ⚠ notes).
"""

from __future__ import annotations

import hashlib
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tunekit.config.schema import Config
from tunekit.data.mm_plugins import open_image
from tunekit.errors import DataError, TunekitError
from tunekit.infer.engine import ChatEngine

from .i18n import t

#: the largest image the Chat tab accepts (also Gradio's ``max_file_size`` for the board's uploads)
MAX_UPLOAD_BYTES = 20 * 1000 * 1000


class UploadRefused(DataError):
    """An uploaded file the chat cannot use (the message says which file and what to do)."""


def new_conversation() -> dict[str, list]:
    return {"messages": [], "images": [], "shown": []}


def size_text(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


class ChatSession:
    """One loaded model per board (loading is slow; every page shares it)."""

    def __init__(self, upload_dir: Callable[[], Path] | None = None, max_upload_bytes: int = MAX_UPLOAD_BYTES) -> None:
        self.engine = None
        self.description = ""
        self.upload_dir = upload_dir  # where accepted images are copied (the board's served folder)
        self.max_upload_bytes = int(max_upload_bytes)
        self._lock = threading.Lock()

    def load(self, cfg: Config) -> str:
        with self._lock:
            self.engine = None
            self.engine = ChatEngine(cfg)
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

    def stream(
        self, messages: list[dict[str, str]], system: str | None, images: list[str] | None = None, **gen: Any
    ) -> Iterator[str]:
        if self.engine is None:
            raise RuntimeError("no model loaded")
        yield from self.engine.stream_chat(messages, system=system or None, images=images or None, **gen)

    # ---------------------------------------------------------------- images
    def accept_image(self, path: str, lang: str = "en") -> str:
        """The checked copy of an uploaded image (in :attr:`upload_dir`); :class:`UploadRefused` says why not."""
        file = Path(path)
        name = file.name
        if self.engine is None:
            raise UploadRefused(t("chat_need_model", lang))
        if self.engine.mm is None:  # ChatEngine: the template's media plugin, None for a text-only template
            raise UploadRefused(t("chat_image_text_only", lang).format(name=name, template=self.engine.cfg.template))
        size = file.stat().st_size if file.is_file() else -1
        if size < 0:
            raise UploadRefused(t("chat_image_missing", lang).format(name=name))
        if size > self.max_upload_bytes:
            raise UploadRefused(
                t("chat_image_too_large", lang).format(
                    name=name, size=size_text(size), limit=size_text(self.max_upload_bytes)
                )
            )
        try:
            open_image(str(file), "chat")  # fully decoded: a truncated or non-image file fails here
        except DataError:
            raise UploadRefused(t("chat_image_corrupt", lang).format(name=name)) from None
        if self.upload_dir is None:
            return str(file.resolve())
        digest = hashlib.sha256(file.read_bytes()).hexdigest()[:20]
        target = self.upload_dir() / f"chat-{digest}{file.suffix.lower()}"
        if not target.exists():
            shutil.copyfile(file, target)
        return str(target)

    # ---------------------------------------------------------------- one turn
    def turn(
        self,
        convo: Mapping[str, list] | None,
        text: str,
        image: str | None = None,
        system: str | None = None,
        lang: str = "en",
        **gen: Any,
    ) -> Iterator[dict[str, list]]:
        """Send ``text`` (with ``image``, if one was uploaded): yields the conversation as the reply streams in.

        The turn joins ``messages`` / ``images`` only when the reply completes; a refused image or a failed
        reply leaves them as they were and shows a ⚠ note in ``shown``."""
        base = {k: list(v) for k, v in (convo or new_conversation()).items()}
        shown = base["shown"]
        if not text:
            yield base
            return
        try:
            added = [self.accept_image(image, lang)] if image else []
            if not self.loaded:
                raise UploadRefused(t("chat_need_model", lang))
        except TunekitError as exc:
            shown += [{"role": "user", "content": text}, {"role": "assistant", "content": f"⚠ {exc}"}]
            yield {**base, "shown": shown}
            return
        user = {"role": "user", "content": "<image>" * len(added) + text}
        messages, images = base["messages"] + [user], base["images"] + added
        shown += [{"role": "user", "content": {"path": p}} for p in added] + [{"role": "user", "content": text}]
        shown.append({"role": "assistant", "content": ""})
        yield {**base, "shown": shown}
        reply = ""
        try:
            for piece in self.stream(messages, system, images=images, **gen):
                reply += piece
                shown[-1] = {"role": "assistant", "content": reply}
                yield {**base, "shown": shown}
        except TunekitError as exc:
            shown[-1] = {"role": "assistant", "content": f"{reply}⚠ {exc}"}
            yield {**base, "shown": shown}
            return
        yield {"messages": messages + [{"role": "assistant", "content": reply}], "images": images, "shown": shown}
