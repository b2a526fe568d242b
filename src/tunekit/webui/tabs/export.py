"""The Export tab: ``tunekit export`` (merge adapters, shard, quantize) as a board job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from tunekit.config.secrets import mask_secrets

from ..command import command_line
from ..form import FormView
from ..i18n import t
from . import Page, errors_md, model_values, template_dropdown


@dataclass
class ExportTab:
    model: Any
    adapter: Any
    template: Any
    form: FormView  # the export options
    use_trained: Any
    export_btn: Any
    command: Any
    errors: Any
    log: Any


def build(page: Page) -> ExportTab:
    lang, L = page.lang, page.label
    with gr.Tab(t("tab_export", lang), id="export", elem_id="tk-tab-export") as tab:
        L(tab, "tab_export")
        with gr.Row():
            model = L(gr.Textbox(label=t("export_model", lang), elem_id="tk-export-model"), "export_model")
            adapter = L(gr.Textbox(label=t("export_adapter", lang), elem_id="tk-export-adapter"), "export_adapter")
            template = template_dropdown(page, "tk-export-template")
        form = FormView(page.board.tab_specs("export"))
        form.render_flat(lang)
        with gr.Row():
            use_trained = gr.Button("← Train", size="sm", elem_id="tk-export-use-trained")
            export_btn = L(
                gr.Button(t("export_btn", lang), variant="primary", elem_id="tk-export-btn"), "export_btn", "value"
            )
        command = L(
            gr.Code(
                language="shell",
                label=t("command", lang),
                lines=2,
                max_lines=8,
                interactive=False,
                elem_id="tk-export-command",
                wrap_lines=True,
            ),
            "command",
        )
        errors = gr.Markdown(elem_id="tk-export-errors")
        log = L(
            gr.Textbox(label=t("export_log", lang), lines=8, interactive=False, elem_id="tk-export-log"), "export_log"
        )
    return ExportTab(model, adapter, template, form, use_trained, export_btn, command, errors, log)


def wire(page: Page, tab: ExportTab) -> None:
    board = page.board

    def on_export(data):
        lang = data[page.lang_radio]
        vals = model_values(data[tab.model], data[tab.adapter], data[tab.template])
        vals.update(board.values(tab.form.read_map(data)))
        vals = {k: v for k, v in vals.items() if v is not None}
        cmd = command_line(mask_secrets(vals), "export")
        check = board.validate(vals)
        if not check.ok:
            return errors_md(check, lang), cmd
        if not check.config.export_dir:
            return "⚠ set export_dir", cmd
        if board.runner.busy:
            return f"⚠ {t('busy', lang)}", cmd
        board.start_export(vals)
        return "", cmd

    inputs = {tab.model, tab.adapter, tab.template, *tab.form.inputs, page.lang_radio}
    page.then_wake(
        tab.export_btn.click(on_export, inputs=inputs, outputs=[tab.errors, tab.command], api_visibility="private")
    )
