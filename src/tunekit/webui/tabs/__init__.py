"""One module per board tab: each builds its widgets into a small dataclass (the tab's state, addressed by
name) and wires its handlers. Handlers get their inputs as a ``{component: value}`` dict (Gradio's set
inputs) and answer with a ``{component: update}`` dict, so no handler depends on widget order.

:class:`Page` is what the tabs share: the :class:`~tunekit.webui.board.Board`, the language picker,
the progress timer and the list of texts a language switch re-labels. Every event is registered with
:meth:`Page.on`, so that a failing handler answers in the board's words (:mod:`tunekit.webui.guard`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from tunekit.errors import TunekitError

from ..board import Board
from ..form import TAKE_VALUES_JS, takes_values, template_choices
from ..guard import Guard
from ..i18n import t
from ..validation import Validation


@dataclass
class Page:
    board: Board
    lang: str
    templates: list[str]
    lang_radio: Any = None
    timer: Any = None
    texts: list[tuple[Any, str, str]] = field(default_factory=list)  # (component, text key, property)
    guard: Guard | None = None  # made on the first event, after the language picker

    def on(self, trigger, fn, inputs=None, outputs=None, **kwargs):
        """Register ``fn`` on ``trigger`` (``button.click``, ``event.then``, a list of listeners, ...) with the
        other keywords unchanged, wrapped so that a failure answers in the page's language (:meth:`Guard.on`);
        the event's ``Dependency``. Events of one function share its wrapper (:meth:`Guard.on`)."""
        if self.guard is None:
            self.guard = Guard(self.lang_radio, self.lang)
        if inputs is not None and "js" not in kwargs and takes_values(inputs):
            kwargs["js"] = TAKE_VALUES_JS  # a form's values, from the page's store (FormView.add_values)
        return self.guard.on(trigger, fn, inputs, outputs, **kwargs)

    def label(self, comp, key: str, prop: str = "label"):
        """Register ``comp``'s ``prop`` as the board text ``key`` (re-labelled on a language switch)."""
        self.texts.append((comp, key, prop))
        return comp

    def relabel(self, outputs, words) -> None:
        """Re-word ``outputs`` on a language switch with ``words(lang)`` (their updates): what one text per property
        (:meth:`label`) cannot say, such as a dropdown's choices or a chart's axis titles and legend."""
        self.on(
            self.lang_radio.change,
            words,
            inputs=self.lang_radio,
            outputs=outputs,
            show_progress="hidden",
            api_visibility="private",
        )

    def wake(self):
        """Start polling when there is a job to show (the timer stops itself once the job has ended)."""
        return gr.Timer(active=self.board.runner.poll() is not None)

    def then_wake(self, event) -> None:
        self.on(event.then, self.wake, outputs=self.timer, api_visibility="private")


def errors_md(check: Validation | None, lang: str) -> str:
    if check is None or check.ok:
        return "" if check is None else f"✓ {t('valid', lang)}"
    return f"**{t('invalid', lang)}**\n\n```\n{check.text(lang)}\n```"


def template_dropdown(page: Page, elem_id: str):
    """A tab's own template picker; its "(none)" follows the language switch."""
    dropdown = gr.Dropdown(
        choices=template_choices(page.templates, page.lang),
        value="",
        allow_custom_value=True,
        label=t("chat_template", page.lang),
        elem_id=elem_id,
    )
    page.relabel(dropdown, lambda lang: gr.update(choices=template_choices(page.templates, lang)))
    return page.label(dropdown, "chat_template")


def follow_train_load(page: Page, train, form) -> None:
    """The Train tab's "Load YAML" also sets ``form``'s options that the Train form lacks (the generation options of
    the Chat and Evaluate & predict tabs): a loaded config's ``max_new_tokens`` is not lost. ``train``: the Train tab
    (its ``load_btn`` and ``config_path``); ``form``: a :class:`~tunekit.webui.form.FormView`."""

    def on_train_load(path):
        try:
            values = page.board.load_yaml(path, "chat")
        except TunekitError:
            return gr.skip()  # the Train tab says what is wrong with the file
        return form.update_map(values={k: v for k, v in values.items() if k in form.comps})

    page.on(
        train.load_btn.click, on_train_load, inputs=train.config_path, outputs=form.inputs, api_visibility="private"
    )
