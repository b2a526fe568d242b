"""The Evaluate & predict tab: ``tunekit train`` with ``do_train: false`` on the Train tab's options, and
every metric evaluation and prediction wrote (loss, BLEU, ROUGE, ...)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from tunekit.config.secrets import mask_secrets

from ..command import command_line
from ..i18n import t
from . import Page, errors_md


@dataclass
class EvalTab:
    adapter: Any
    dataset: Any
    output_dir: Any
    do_eval: Any
    do_predict: Any
    run_btn: Any
    command: Any
    errors: Any
    status: Any
    results: Any


def build(page: Page) -> EvalTab:
    lang, L = page.lang, page.label
    with gr.Tab(t("tab_eval", lang), id="eval", elem_id="tk-tab-eval") as tab:
        L(tab, "tab_eval")
        with gr.Row():
            adapter = L(gr.Textbox(label=t("chat_adapter", lang), elem_id="tk-eval-adapter"), "chat_adapter")
            dataset = gr.Dropdown(
                choices=[], multiselect=True, allow_custom_value=True, label="eval_dataset", elem_id="tk-eval-dataset"
            )
            output_dir = L(gr.Textbox(label=t("eval_output_dir", lang), elem_id="tk-eval-out"), "eval_output_dir")
        with gr.Row():
            do_eval = L(gr.Checkbox(value=True, label=t("eval_do_eval", lang), elem_id="tk-do-eval"), "eval_do_eval")
            do_predict = L(
                gr.Checkbox(value=False, label=t("eval_do_predict", lang), elem_id="tk-do-predict"), "eval_do_predict"
            )
            run_btn = L(gr.Button(t("eval_btn", lang), variant="primary", elem_id="tk-eval-btn"), "eval_btn", "value")
        command = L(
            gr.Code(
                language="shell",
                label=t("command", lang),
                lines=2,
                max_lines=8,
                interactive=False,
                elem_id="tk-eval-command",
                wrap_lines=True,
            ),
            "command",
        )
        errors = gr.Markdown(elem_id="tk-eval-errors")
        status = gr.Markdown(elem_id="tk-eval-status")
        results = L(gr.JSON(label=t("eval_results", lang), elem_id="tk-eval-results"), "eval_results")
    return EvalTab(adapter, dataset, output_dir, do_eval, do_predict, run_btn, command, errors, status, results)


def wire(page: Page, tab: EvalTab, form) -> None:
    """``form``: the Train tab's :class:`~tunekit.webui.form.FormView` (the run's options)."""
    board = page.board

    def on_eval(data):
        lang = data[page.lang_radio]
        vals = board.eval_values(
            form.read_map(data),
            data[tab.adapter],
            data[tab.dataset],
            data[tab.output_dir],
            bool(data[tab.do_eval]),
            bool(data[tab.do_predict]),
        )
        check = board.validate(vals)
        out = {tab.command: command_line(mask_secrets(vals)), tab.output_dir: vals["output_dir"], tab.errors: ""}
        if not check.ok:
            return {**out, tab.errors: errors_md(check, lang)}
        if board.runner.busy:
            return {**out, tab.errors: f"⚠ {t('busy', lang)}"}
        board.start_job("train", vals, vals["output_dir"], kind="eval")
        return out

    inputs = {*form.inputs, tab.adapter, tab.dataset, tab.output_dir, tab.do_eval, tab.do_predict, page.lang_radio}
    page.then_wake(
        tab.run_btn.click(
            on_eval, inputs=inputs, outputs=[tab.errors, tab.command, tab.output_dir], api_visibility="private"
        )
    )
