"""Every board handler answers in the board's words: a handler that raises, or that answers in a shape Gradio
cannot use (the empty ``{}`` that once made Gradio toast "didn't return enough output values"), shows one line
in its tab's message area instead of Gradio's error toast with the raw text.

Every event of the board is registered through :meth:`Guard.on` (in a tab: :meth:`tunekit.webui.tabs.Page.on`),
which wraps the handler before Gradio sees it; ``tests/webui/test_webui_guard.py`` fails on a handler of the built
board that was registered around it. The message goes to the first output that is a message area (the tab's
errors / status Markdown, see :data:`MESSAGE_AREAS`); a handler without one shows it as a warning notice. The
traceback goes to the log of the ``tunekit webui`` process, never to the page. A
:class:`~tunekit.errors.TunekitError` is a message for the user already: its text is shown, cut to one short line.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import gradio as gr
from gradio.blocks import Block

from tunekit.errors import TunekitError

from .i18n import t
from .paths import safe_message
from .problems_zh import say_error

log = logging.getLogger("tunekit.webui")

# Where a failing handler's line goes, by elem_id: the first of these among the handler's outputs.
MESSAGE_AREAS = (
    "tk-errors",
    "tk-eval-errors",
    "tk-export-errors",
    "tk-chat-info",
    "tk-status",
    "tk-eval-status",
    "tk-plan-out",
)
MAX_CHARS = 300


class BadAnswer(TypeError):
    """A handler answered in a shape Gradio cannot map to its outputs."""


def failure_message(exc: BaseException, lang: str) -> str:
    """One line in the board's words: a TunekitError's own text (short; its keyed problems or message said in
    ``lang``, ``problems_zh.say_error``), else a fixed sentence."""
    if isinstance(exc, TunekitError):
        reason = " ".join(safe_message(say_error(exc, lang), max_lines=3).split())
        if len(reason) > MAX_CHARS:
            reason = reason[: MAX_CHARS - 1] + "…"
        return "⚠ " + t("handler_failed_because", lang).format(reason=reason)
    return "⚠ " + t("handler_failed", lang)


def checked_answer(answer: Any, outputs: list) -> Any:
    """``answer`` as Gradio maps it to ``outputs``; ``{}`` (nothing to change) becomes a skip of every output.
    :class:`BadAnswer` for a shape Gradio would refuse with its own raw error."""
    n = len(outputs)
    if n == 0:
        return answer
    if isinstance(answer, dict):
        if not answer:  # nothing to change (one output: the value {}, a JSON output's empty object)
            return gr.skip() if n > 1 else answer
        if all(isinstance(k, Block) for k in answer):
            ids = {o._id for o in outputs}
            if any(k._id not in ids for k in answer):
                raise BadAnswer("an answer for a component that is not an output of this handler")
            return answer
        if n == 1 or answer == gr.skip():
            return answer
        raise BadAnswer(f"a dict answer for {n} outputs")
    if n == 1 or (isinstance(answer, (tuple, list)) and len(answer) == n):
        return answer
    raise BadAnswer(f"{type(answer).__name__} answer for {n} outputs")


class _Handler:
    """What one wrapped handler needs to answer a failure: where its message goes and which language. ``inputs``
    and ``outputs`` as the event was given them (one component, a list, or a set: Gradio's dict of inputs)."""

    def __init__(self, fn: Callable, inputs, outputs, lang_input, lang: str):
        self.outputs = _as_list(outputs)
        self.area = next(
            (o for name in MESSAGE_AREAS for o in self.outputs if getattr(o, "elem_id", None) == name), None
        )
        self.inputs = _as_list(inputs)
        self.as_dict = isinstance(inputs, AbstractSet)
        self.lang_input = lang_input
        self.lang = lang
        self.name = getattr(fn, "__name__", type(fn).__name__)

    def lang_of(self, args: tuple) -> str:
        value = None
        if self.lang_input is not None and args:
            if self.as_dict and isinstance(args[0], dict):
                value = args[0].get(self.lang_input)
            elif self.lang_input in self.inputs and len(args) > self.inputs.index(self.lang_input):
                value = args[self.inputs.index(self.lang_input)]
        return value if value in ("en", "zh") else self.lang

    def failed(self, exc: BaseException, args: tuple) -> Any:
        log.warning("board handler %s failed", self.name, exc_info=(type(exc), exc, exc.__traceback__))
        message = failure_message(exc, self.lang_of(args))
        if self.area is not None:
            return {self.area: message}
        gr.Warning(message)  # no message area among the outputs: a notice in the board's words
        return None if not self.outputs else gr.skip()


def guarded(fn: Callable, handler: _Handler) -> Callable:
    """``fn`` with its exceptions and malformed answers turned into the board's message (generators too)."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*args, **kwargs):
            try:
                for answer in fn(*args, **kwargs):
                    yield checked_answer(answer, handler.outputs)
            except Exception as exc:
                yield handler.failed(exc, args)

        return gen
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        return fn  # the board has none: Gradio's own handling stays for one added later

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return checked_answer(fn(*args, **kwargs), handler.outputs)
        except Exception as exc:
            return handler.failed(exc, args)

    return call


def _defers_by_default(trigger, kwargs: dict) -> bool:
    """Whether Gradio would register this event ``always_last`` by itself: no mode given, and its first trigger is a
    change (``gr.on`` without triggers: its inputs' changes)."""
    if "trigger_mode" in kwargs:
        return False
    first = (kwargs.get("triggers") or [None])[0] if trigger is gr.on else trigger
    return first is None or getattr(first, "event_name", None) in ("change", "key_up")


def _as_list(components) -> list:
    """An event's inputs or outputs as the list Gradio makes of them (a set in the order of its components' ids)."""
    if components is None:
        return []
    if isinstance(components, AbstractSet):
        return sorted(components, key=lambda c: c._id)
    if isinstance(components, Sequence):
        return list(components)
    return [components]


MAX_PROGRESS_TARGETS = 4
"""An event with more outputs shows its progress only where its registration says (``show_progress_on``), and a
hidden one nowhere. Otherwise Gradio gives each of a form's 233 fields a status tracker that redraws its elapsed
time every 0.1 s while the handler runs, and looks each one up in the page's component tree on every status change:
the longer the handler (a loaded machine), the longer the browser is busy after each keystroke."""


class Guard:
    """Registers the board's handlers, each wrapped by :func:`guarded` first.

    ``lang_input``: the language picker; a handler that reads it answers a failure in the page's language, the
    others in ``lang``."""

    def __init__(self, lang_input=None, lang: str = "en"):
        self.lang_input = lang_input
        self.lang = lang
        self._wrapped: dict[tuple, tuple[Callable, Callable]] = {}  # (fn, outputs, inputs) -> (wrapper, fn)

    def on(self, trigger, fn: Callable | None, inputs=None, outputs=None, **kwargs):
        """``trigger(fn=<fn guarded>, inputs=inputs, outputs=outputs, **kwargs)``, and its answer (the event's
        ``Dependency``, for ``.then``). ``trigger``: an event listener (``button.click``, ``box.change``,
        ``timer.tick``, ``demo.load``, ``event.then``, ``gr.on``) or a list of listeners (``gr.on`` over them).
        A JavaScript-only event (``fn`` None) is passed on as it is.

        Events of one function with the same inputs and outputs (a button and a textbox's submit) share one
        wrapper: one handler, as they were unwrapped. The concurrency group stays the one Gradio makes for the
        function itself (``str(id(fn))``, unless ``concurrency_id`` is given), not one per wrapper.

        A change event runs each time (``trigger_mode="multiple"``, in its function's queue) unless it asks to
        defer (``"always_last"``, Gradio's default for changes): Gradio 6.31's page re-dispatches a deferred
        event's whole *trigger* when its run ends, so two deferring handlers of one trigger (or of two triggers
        they share) that overlap re-run each other; after a YAML load the page did so for seconds, a core busy.
        One deferring handler per trigger (``tests/webui/test_webui_guard.py``)."""
        if isinstance(trigger, (list, tuple)):
            trigger, kwargs = gr.on, {"triggers": list(trigger), **kwargs}
        if fn is not None and _defers_by_default(trigger, kwargs):
            kwargs["trigger_mode"] = "multiple"
        if kwargs.get("show_progress") == "hidden" or len(_as_list(outputs)) > MAX_PROGRESS_TARGETS:
            kwargs.setdefault("show_progress_on", [])  # where it shows, if anywhere: see MAX_PROGRESS_TARGETS
        if fn is not None and not getattr(fn, "__tk_guarded__", False):
            fn, raw = self._wrapper(fn, inputs, outputs)
            if kwargs.get("concurrency_id") is None:
                kwargs["concurrency_id"] = str(id(raw))
        return trigger(fn=fn, inputs=inputs, outputs=outputs, **kwargs)

    def _wrapper(self, fn: Callable, inputs, outputs) -> tuple[Callable, Callable]:
        """``fn``'s wrapper for these inputs and outputs, and the function it wraps (the first one registered)."""
        ids = tuple(c._id for c in _as_list(outputs)), tuple(c._id for c in _as_list(inputs))
        key = (fn, *ids, isinstance(inputs, AbstractSet))
        if key not in self._wrapped:
            wrapped = guarded(fn, _Handler(fn, inputs, outputs, self.lang_input, self.lang))
            if wrapped is not fn:
                wrapped.__tk_guarded__ = True  # type: ignore[attr-defined]
            self._wrapped[key] = (wrapped, fn)
        return self._wrapped[key]
