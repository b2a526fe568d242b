"""The Export tab: ``tunekit export`` (merge the adapters into the model, shard, legacy format, quantized export)
and ``tunekit verify`` of the exported folder, from the tab's own model / adapter / checkpoint boxes and the export
options, each command shown as it runs, with the tab's own status and log."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import gradio as gr

from tunekit.config.problems import Said
from tunekit.config.secrets import mask_secrets
from tunekit.export.quantize import GPTQ_PACKAGES

from ..board import Board
from ..command import command_line, verb_line
from ..form import FormView, make_widget
from ..i18n import t
from ..paths import PathRefused, safe_message
from ..problems_zh import say, say_error
from . import Page, errors_md
from . import jobs as job_area
from . import source as model_source

MAIN_FIELDS = ("export_dir", "export_size", "export_legacy_format", "export_device", "export_verify")
QUANT_FIELDS = (
    "export_quantization_bit",
    "export_quantization_method",
    "export_quantization_dataset",
    "export_quantization_nsamples",
    "export_quantization_maxlen",
)
# The packages each quantized-export method needs (tunekit.export.quantize.check_available refuses without them).
METHOD_PACKAGES = {"bnb": ("bitsandbytes",), "gptq": GPTQ_PACKAGES}


@dataclass
class ExportTab:
    source: model_source.ModelSource
    form: FormView  # the export options (the schema's export group)
    preview_btn: Any
    export_btn: Any
    verify_btn: Any
    stop_btn: Any
    command: Any
    errors: Any
    area: job_area.JobArea


def method_choices(choices: list[tuple[str, str]], lang: str) -> list[tuple[str, str]]:
    """The schema's quantization methods, each labelled with the packages it still needs here."""
    out = []
    for label, value in choices:
        missing = [p for p in METHOD_PACKAGES.get(value, ()) if importlib.util.find_spec(p) is None]
        out.append((f"{label} ({t('export_needs', lang)} {', '.join(missing)})" if missing else label, value))
    return out


def _render(page: Page) -> FormView:
    """The export options: the main ones, then "Quantized export", then any option added to the group later."""
    form = FormView(page.board.tab_specs("export"))
    by_name = {s.name: s for s in form.specs}

    def rows(names, per_row=3):
        names = [n for n in names if n in by_name]
        for i in range(0, len(names), per_row):
            with gr.Row():
                for name in names[i : i + per_row]:
                    form.comps[name] = make_widget(by_name[name], page.lang)

    rows(MAIN_FIELDS)
    with gr.Accordion(t("export_quant", page.lang), open=False, elem_id="tk-export-quant") as acc:
        page.label(acc, "export_quant")
        rows(QUANT_FIELDS)
    rows([s.name for s in form.specs if s.name not in form.comps])
    form.specs = [s for s in form.specs if s.name in form.comps]
    method = form.comps.get("export_quantization_method")
    if method is not None:
        method.choices = method_choices(method.choices, page.lang)
    form.add_values("export")  # the handlers read the form through form.values
    return form


def build(page: Page) -> ExportTab:
    lang, L = page.lang, page.label
    with gr.Tab(t("tab_export", lang), id="export", elem_id="tk-tab-export") as tab:
        L(tab, "tab_export")
        src = model_source.build(page, "export", "export_model", "export_adapter")
        form = _render(page)
        with gr.Row():
            preview_btn = L(gr.Button(t("preview_btn", lang), elem_id="tk-export-preview"), "preview_btn", "value")
            export_btn = L(
                gr.Button(t("export_btn", lang), variant="primary", elem_id="tk-export-btn"), "export_btn", "value"
            )
            verify_btn = L(
                gr.Button(t("export_verify_btn", lang), elem_id="tk-export-verify"), "export_verify_btn", "value"
            )
            stop_btn = L(gr.Button(t("stop_btn", lang), variant="stop", elem_id="tk-export-stop"), "stop_btn", "value")
        command = L(
            gr.Code(
                language="shell", label=t("command", lang), lines=2, max_lines=8, interactive=False,
                elem_id="tk-export-command", wrap_lines=True,
            ),
            "command",
        )  # fmt: skip
        errors = gr.Markdown(elem_id="tk-export-errors")
        area = job_area.build(page, "export", ("export", "verify"))
    return ExportTab(src, form, preview_btn, export_btn, verify_btn, stop_btn, command, errors, area)


def export_values(board: Board, source: dict[str, Any], form: dict[str, Any]) -> dict[str, Any]:
    """``tunekit export``'s options: the tab's model / adapter / template, then the export options it sets."""
    return {**source, **board.values(form)}


def verify_args(board: Board, export_dir: str) -> list[str]:
    """``tunekit verify``'s argument: the export folder as written (a leading ``-`` is read as a folder, not a
    flag); :class:`PathRefused` outside the allowed roots."""
    board.policy.check(export_dir, Said("path_what_option", option="export_dir"))
    return [f"./{export_dir}" if export_dir.startswith("-") else export_dir]


def wire(page: Page, tab: ExportTab, train=None, demo=None) -> None:
    """``train``: the Train tab ("Use the Train tab's")."""
    board, src = page.board, tab.source
    model_source.wire(page, src, train.form if train is not None else None)

    def prepared(data):
        vals = export_values(board, src.values(data), tab.form.read_map(data))
        check, lang = board.validate(vals), data[page.lang_radio]
        problem = errors_md(check, lang) if not check.ok else ""
        if check.ok and not check.config.model_name_or_path:
            problem = f"⚠ {t('src_need_model', lang)}"
        elif check.ok and not check.config.export_dir:
            problem = f"⚠ {t('export_need_dir', lang)}"
        return vals, problem

    def on_preview(data):
        vals, problem = prepared(data)
        return {tab.command: command_line(mask_secrets(vals), "export"), tab.errors: problem}

    def on_export(data):
        vals, problem = prepared(data)
        out = {tab.command: command_line(mask_secrets(vals), "export"), tab.errors: problem}
        if problem:
            return out
        if board.runner.busy:
            return {**out, tab.errors: f"⚠ {say(Said('board_job_running'), data[page.lang_radio])}"}
        board.start_export(vals)
        return out

    def on_verify(data):
        folder = str(tab.form.read_map(data).get("export_dir") or "").strip()
        if not folder:
            return {tab.errors: f"⚠ {t('export_need_dir', data[page.lang_radio])}"}
        try:
            args = verify_args(board, folder)
        except PathRefused as exc:
            return {tab.errors: f"⚠ {safe_message(say_error(exc, data[page.lang_radio]))}"}
        out = {tab.command: verb_line("verify", args), tab.errors: ""}
        if board.runner.busy:
            return {**out, tab.errors: f"⚠ {say(Said('board_job_running'), data[page.lang_radio])}"}
        board.runner.start("verify", args, args[0], kind="verify", env=board.job_env())
        return out

    inputs = {*src.inputs, tab.form.values, page.lang_radio}
    outputs = [tab.command, tab.errors]
    page.on(tab.preview_btn.click, on_preview, inputs=inputs, outputs=outputs, api_visibility="private")
    for button, handler in ((tab.export_btn, on_export), (tab.verify_btn, on_verify)):
        job_area.then_wake(
            page,
            tab.area,
            page.on(button.click, handler, inputs=inputs, outputs=outputs, api_visibility="private"),
        )
    job_area.wire(page, tab.area, demo, stop=tab.stop_btn)
