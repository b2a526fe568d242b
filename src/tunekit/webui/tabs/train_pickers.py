"""The Train tab's model and data pickers and its Start gate, wired (what they do: :mod:`tunekit.webui.pickers`).

- The dataset pickers (``dataset``, ``eval_dataset``) list what fits the stage and the model when the page opens and
  whenever ``dataset_dir``, the stage, the model, its template or the language changes ("Reload dataset_info.json"
  reads the file again); a name picked twice is dropped.
- A local model folder sets the template of its family (or ``jinja`` for its own chat template) when the template is
  empty or was set that way, and a line above the form says so.
- Start is enabled only for a valid config with a model and a fitting dataset; the reason is shown beside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gradio as gr

from .. import pickers
from ..i18n import t
from ..validation import Validation
from . import Page, errors_md

if TYPE_CHECKING:
    from .train import TrainTab

DATASET_PICKERS = ("dataset", "eval_dataset")


def start_update(page: Page, tab: TrainTab, check: Validation, lang: str) -> dict[Any, Any]:
    """Start on or off, and the reason beside it."""
    reason = pickers.start_reason(page.board.policy, check, lang)
    return {tab.start_btn: gr.update(interactive=not reason), tab.start_reason: f"⚠ {reason}" if reason else ""}


def initial_reason(page: Page) -> str:
    """The reason Start is off for the default form (the page's first state, before any edit)."""
    board = page.board
    reason = pickers.start_reason(board.policy, board.validate(board.values(board.defaults())), page.lang)
    return f"⚠ {reason}" if reason else ""


def start_button(page: Page):
    """The Start button, off when the default form may not start (its reason: :func:`initial_reason`)."""
    return gr.Button(
        t("start_btn", page.lang), variant="primary", elem_id="tk-start", interactive=not initial_reason(page)
    )


def wire(page: Page, tab: TrainTab) -> None:
    _wire_datasets(page, tab)
    _wire_model(page, tab)


def _wire_datasets(page: Page, tab: TrainTab) -> None:
    board, form = page.board, tab.form
    needed = ("dataset_dir", "stage", "model_name_or_path", "template")
    if not all(name in form.comps for name in needed):
        return
    pickers_out = [form[name] for name in DATASET_PICKERS if name in form.comps]
    listed = gr.State(None)  # the choices this page shows: an unchanged list is not sent again
    outputs = [*pickers_out, listed]

    def on_dataset_list(data):
        """The pickers' choices: what fits the stage and the model, with rows and format. The same list is not
        re-sent: re-rendering an open dropdown can swallow the click a user is making on it."""
        values, lang = form.read_map(data), data[page.lang_radio]
        media = pickers.model_media(board.policy, values["model_name_or_path"], values["template"])
        listing = pickers.list_datasets(board.policy, values["dataset_dir"], values["stage"], media)
        choices = listing.choices(lang)
        if choices == data[listed]:
            return {comp: gr.skip() for comp in outputs}
        return {**{comp: gr.update(choices=choices) for comp in pickers_out}, listed: choices}

    inputs = {*(form[name] for name in needed), page.lang_radio, listed}
    common = dict(inputs=inputs, outputs=outputs, show_progress="hidden", api_visibility="private")
    # gr.on without triggers: when the page loads and on each change of an input
    page.on(gr.on, on_dataset_list, concurrency_id="pickers", **common)
    page.on(tab.ds_refresh.click, on_dataset_list, **common)

    def on_dataset_pick(picked):
        """The multiselect keeps each name once."""
        names = pickers.unique(picked)
        return names if names != list(picked or ()) else gr.skip()

    for comp in pickers_out:
        page.on(
            comp.change, on_dataset_pick, inputs=comp, outputs=comp, show_progress="hidden", api_visibility="private"
        )


def _wire_model(page: Page, tab: TrainTab) -> None:
    """The template from the model folder (its family's, or jinja for its own chat template), said in one line."""
    board, form = page.board, tab.form
    if "model_name_or_path" not in form.comps or "template" not in form.comps:
        return
    model, template = form["model_name_or_path"], form["template"]

    def on_model_template(data):
        """An empty template, or one the board set from the previous folder, follows the new folder."""
        hint = pickers.template_hint(board.policy, data[model])
        current, auto = data[template] or "", data[tab.auto_template] or ""
        new = current if current not in ("", auto) else hint.template or ""
        out: dict[Any, Any] = {
            tab.auto_template: new if new == hint.template else "",
            tab.model_note: hint.line(new, data[page.lang_radio]),
        }
        if new != current:
            out[template] = new
        return out

    page.on(
        model.change,
        on_model_template,
        inputs={model, template, tab.auto_template, page.lang_radio},
        outputs=[template, tab.auto_template, tab.model_note],
        show_progress="hidden",
        api_visibility="private",
    )

    def on_lang_pickers(data):
        lang, values = data[page.lang_radio], form.read_map(data)
        check = board.validate(board.values(values))
        hint = pickers.template_hint(board.policy, values.get("model_name_or_path"))
        return {
            **start_update(page, tab, check, lang),
            tab.model_note: hint.line(values.get("template"), lang),
            tab.errors: errors_md(check, lang),  # the edit check's line, in the new words
        }

    page.on(
        page.lang_radio.change,
        on_lang_pickers,
        inputs={form.values, page.lang_radio},
        outputs=[tab.start_btn, tab.start_reason, tab.model_note, tab.errors],
        show_progress="hidden",
        api_visibility="private",
    )
