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

A reasoning model's thought (:mod:`tunekit.infer.reasoning`) is shown as a collapsible block above its answer (a
Chatbot message with ``metadata.title``: the page's word for "Thinking", open while the thought streams, folded when
done); the conversation keeps the answer as the reply's content and the thought as its ``reasoning``.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tunekit.config.schema import Config
from tunekit.data.mm_plugins import open_image
from tunekit.errors import DataError, TunekitError
from tunekit.infer.engine import ChatEngine
from tunekit.infer.reasoning import THOUGHT, Part

from .i18n import t
from .problems_zh import say_error

log = logging.getLogger("tunekit.webui")

#: the largest image the Chat tab accepts (also Gradio's ``max_file_size`` for the board's uploads)
MAX_UPLOAD_BYTES = 20 * 1000 * 1000


class UploadRefused(DataError):
    """An uploaded file the chat cannot use (the message says which file and what to do)."""


class NoModel(TunekitError):
    """A message sent with no model loaded (or one unloaded by another page while the turn started)."""


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
        self,
        messages: list[dict[str, str]],
        system: str | None,
        images: list[str] | None = None,
        lang: str = "en",
        **gen: Any,
    ) -> Iterator[Part]:
        """The reply's ``(kind, text)`` deltas: a reasoning model's thought, then the answer."""
        engine = self.engine  # one read: another page may unload the model meanwhile
        if engine is None:
            raise NoModel(t("chat_need_model", lang))
        yield from engine.stream_parts(messages, system=system or None, images=images or None, **gen)

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
        reply leaves them as they were and shows a ⚠ note in ``shown``, in ``lang``: a tunekit error from its key
        (``problems_zh.say_error``) or the board's words, any other failure as "the reply failed: <its type and
        text>" (the library's text stays as it is; the traceback goes to the board's log)."""
        base = {k: list(v) for k, v in (convo or new_conversation()).items()}
        shown = base["shown"]
        if not text:
            yield base
            return
        try:
            added = [self.accept_image(image, lang)] if image else []
            if not self.loaded:
                raise NoModel(t("chat_need_model", lang))
        except TunekitError as exc:
            note = f"⚠ {say_error(exc, lang)}"
            shown += [{"role": "user", "content": text}, {"role": "assistant", "content": note}]
            yield {**base, "shown": shown}
            return
        user = {"role": "user", "content": "<image>" * len(added) + text}
        messages, images = base["messages"] + [user], base["images"] + added
        shown += [{"role": "user", "content": {"path": p}} for p in added] + [{"role": "user", "content": text}]
        shown.append({"role": "assistant", "content": ""})
        yield {**base, "shown": shown}
        reply = thought = ""
        try:
            for kind, piece in self.stream(messages, system, images=images, lang=lang, **gen):
                if kind == THOUGHT:
                    if not thought:  # the thought's block goes above the answer's message
                        shown.insert(len(shown) - 1, {})
                    thought += piece
                    shown[-2] = thought_message(thought, lang, done=False)
                else:
                    reply += piece
                    shown[-1] = {"role": "assistant", "content": reply}
                    if thought:
                        shown[-2] = thought_message(thought, lang, done=True)
                yield {**base, "shown": shown}
        except Exception as exc:  # noqa: BLE001 - any failed reply is said in the chat, the rest of the page stays
            if isinstance(exc, TunekitError):
                note = say_error(exc, lang)
            else:
                log.warning("chat reply failed", exc_info=(type(exc), exc, exc.__traceback__))
                note = t("chat_reply_failed", lang).format(error=f"{type(exc).__name__}: {exc}")
            shown[-1] = {"role": "assistant", "content": f"{reply}⚠ {note}"}
            yield {**base, "shown": shown}
            return
        if thought:
            shown[-2] = thought_message(thought, lang, done=True)
        said = {"role": "assistant", "content": reply, **({"reasoning": thought} if thought else {})}
        yield {"messages": messages + [said], "images": images, "shown": shown}


def thought_message(thought: str, lang: str, done: bool) -> dict:
    """The Chatbot's collapsible block of a thought (open while it streams, folded when done)."""
    title = {"title": t("chat_thought", lang), "status": "done" if done else "pending"}
    return {"role": "assistant", "content": thought, "metadata": title}
