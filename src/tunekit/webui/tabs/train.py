"""The Train tab: the form (basic options, the rest under "Advanced"), data preview, memory plan,
command and YAML preview, save / load, start / stop and the run's progress."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from tunekit.config.problems import Said
from tunekit.errors import TunekitError

from .. import backend as adapters
from ..board import format_plan
from ..form import FormView
from ..i18n import t
from ..paths import safe_message
from ..problems_zh import say, say_error
from ..sections import BASIC_FIELDS
from ..validation import Validation
from . import Page, errors_md
from . import train_live as live
from . import train_pickers as pick
from .train_live import wire_first_run, wire_language


@dataclass
class TrainTab:
    form: FormView
    ds_refresh: Any
    samples_n: Any
    samples_btn: Any
    samples_out: Any
    samples_gallery: Any  # thumbnails of the previewed samples' images
    samples_media: Any  # their images / videos / audios and media token counts
    model_note: Any  # one line: the template chosen from the model folder, and why
    auto_template: Any  # gr.State: the template the board set from the model folder ("" when the user chose)
    config_path: Any
    overwrite: Any
    save_btn: Any
    load_btn: Any
    preview_btn: Any
    start_btn: Any
    start_reason: Any  # why Start is off ("" when it is on)
    stop_btn: Any
    errors: Any
    gpu: Any
    gpus: Any
    plan_md: Any
    plan_btn: Any
    autofit_btn: Any
    command: Any
    yaml: Any
    progress: Any
    status: Any
    loss_plot: Any
    lr_plot: Any
    loss_png: Any
    log: Any
    flagged: Any  # gr.State: the fields shown as invalid on this page


def build(page: Page) -> TrainTab:
    lang = page.lang
    with gr.Tab(t("tab_train", lang), id="train", elem_id="tk-tab-train") as tab:
        page.label(tab, "tab_train")
        with gr.Row():
            with gr.Column(scale=3):
                left = _form_column(page)
            with gr.Column(scale=2, elem_id="tk-side"):
                right = _side_column(page)
    return TrainTab(**left, **right)


def _form_column(page: Page) -> dict[str, Any]:
    lang, L = page.lang, page.label
    form = FormView(page.board.tab_specs("train"))
    model_note = gr.Markdown(elem_id="tk-model-note")  # beside the model and template fields (the form's first row)
    form.render(lang, "train", page.templates, basic=BASIC_FIELDS)
    if form.advanced is not None:
        L(form.advanced, "advanced")
    with gr.Accordion(t("samples_out", lang), open=True, elem_id="tk-samples") as samples_acc:
        L(samples_acc, "samples_out")
        with gr.Row():
            ds_refresh = L(
                gr.Button(t("datasets_refresh", lang), size="sm", elem_id="tk-ds-refresh"), "datasets_refresh", "value"
            )
            samples_n = L(
                gr.Number(value=2, precision=0, label=t("samples_n", lang), elem_id="tk-samples-n"), "samples_n"
            )
            samples_btn = L(
                gr.Button(t("samples_btn", lang), size="sm", elem_id="tk-samples-btn"), "samples_btn", "value"
            )
        samples_out = gr.HighlightedText(
            color_map=piece_colors(lang),
            show_legend=True,
            combine_adjacent=True,
            elem_id="tk-samples-out",
            show_label=False,
        )
        # the legend in the new words; a preview in the old ones is cleared (Preview samples shows it again)
        page.relabel(samples_out, lambda lang: gr.HighlightedText(value=None, color_map=piece_colors(lang)))
        samples_media = gr.Markdown(elem_id="tk-samples-media")
        samples_gallery = L(
            gr.Gallery(
                label=t("samples_media", lang),
                columns=6,
                height="auto",
                visible=False,
                elem_id="tk-samples-gallery",
                buttons=["fullscreen"],
                interactive=False,
            ),
            "samples_media",
        )
    with gr.Row():
        config_path = L(
            gr.Textbox(
                value="saves/webui_config.yaml", label=t("config_path", lang), scale=3, elem_id="tk-config-path"
            ),
            "config_path",
        )
        overwrite = L(
            gr.Checkbox(value=False, label=t("overwrite", lang), elem_id="tk-overwrite", scale=1, min_width=100),
            "overwrite",
        )
        save_btn = L(gr.Button(t("save_btn", lang), elem_id="tk-save", scale=1), "save_btn", "value")
        load_btn = L(gr.Button(t("load_btn", lang), elem_id="tk-load", scale=1), "load_btn", "value")
    flagged = gr.State(
        []
    )  # inside the column: a State as a direct child of a gr.Tab makes Gradio 6 duplicate tab labels
    auto_template = gr.State("")
    return dict(
        flagged=flagged,
        model_note=model_note,
        auto_template=auto_template,
        form=form,
        ds_refresh=ds_refresh,
        samples_n=samples_n,
        samples_btn=samples_btn,
        samples_out=samples_out,
        samples_gallery=samples_gallery,
        samples_media=samples_media,
        config_path=config_path,
        overwrite=overwrite,
        save_btn=save_btn,
        load_btn=load_btn,
    )


def _side_column(page: Page) -> dict[str, Any]:
    lang, L = page.lang, page.label
    with gr.Row():
        preview_btn = L(gr.Button(t("preview_btn", lang), elem_id="tk-preview"), "preview_btn", "value")
        start_btn = L(pick.start_button(page), "start_btn", "value")  # off, with its reason, until the form is valid
        stop_btn = L(gr.Button(t("stop_btn", lang), variant="stop", elem_id="tk-stop"), "stop_btn", "value")
    start_reason = gr.Markdown(pick.initial_reason(page), elem_id="tk-start-reason")
    errors = gr.Markdown(elem_id="tk-errors")
    with gr.Accordion(t("plan_title", lang), open=True, elem_id="tk-plan") as plan_acc:
        L(plan_acc, "plan_title")
        with gr.Row():
            gpu_choices, this_machine = page.board.plan_devices(lang)  # "this machine" first, and chosen
            gpu = L(
                gr.Dropdown(
                    choices=gpu_choices,
                    value=this_machine,
                    label=t("plan_gpu", lang),
                    allow_custom_value=True,
                    elem_id="tk-plan-gpu",
                ),
                "plan_gpu",
            )
            gpus = L(gr.Number(value=1, precision=0, label=t("plan_gpus", lang), elem_id="tk-plan-gpus"), "plan_gpus")
            page.relabel(gpu, lambda lang: gr.update(choices=page.board.plan_devices(lang)[0]))  # "this machine"
        plan_md = gr.Markdown(elem_id="tk-plan-out")
        with gr.Row():
            plan_btn = L(gr.Button(t("plan_btn", lang), elem_id="tk-plan-btn", size="sm"), "plan_btn", "value")
            autofit_btn = L(gr.Button(t("autofit_btn", lang), elem_id="tk-autofit", size="sm"), "autofit_btn", "value")
    command = L(
        gr.Code(
            language="shell",
            label=t("command", lang),
            lines=2,
            max_lines=8,
            interactive=False,
            elem_id="tk-command",
            wrap_lines=True,
        ),
        "command",
    )
    yaml = L(
        gr.Code(language="yaml", label=t("yaml", lang), lines=4, max_lines=16, interactive=False, elem_id="tk-yaml"),
        "yaml",
    )
    return dict(
        preview_btn=preview_btn,
        start_btn=start_btn,
        start_reason=start_reason,
        stop_btn=stop_btn,
        errors=errors,
        gpu=gpu,
        gpus=gpus,
        plan_md=plan_md,
        plan_btn=plan_btn,
        autofit_btn=autofit_btn,
        command=command,
        yaml=yaml,
        **live.run_view(page),
    )


PIECE_COLORS = {"trained": "green", "media": "blue"}  # the sample preview's pieces, by board.sample_preview's label


def piece_colors(lang: str) -> dict[str, str]:
    """The sample preview's legend: its pieces' words in ``lang`` and their colours."""
    return {t(f"samples_piece_{label}", lang): color for label, color in PIECE_COLORS.items()}


# ---------------------------------------------------------------- handlers
def plan_text(page: Page, check: Validation, gpu, n_gpus, lang: str) -> tuple[str, dict]:
    """The plan as Markdown, and the overrides Auto-fit would apply. A planner error is said in ``lang`` from its key
    (``problems_zh.say_error``; ``config/problem_texts_plan.py``)."""
    if not check.ok:
        return "", {}
    if not check.config.model_name_or_path:
        return t("plan_need_model", lang), {}
    try:
        plan = adapters.make_plan(check.config, gpu or None, n_gpus or 1)
    except TunekitError as exc:
        return f"⚠ {say_error(exc, lang)}", {}
    except Exception as exc:  # the planner cannot read this model yet: say so, keep the board usable
        return f"⚠ {t('plan_unavailable', lang)}: {type(exc).__name__}: {exc}", {}
    return format_plan(plan, lang), dict(plan.get("overrides") or {})


def wire(page: Page, tab: TrainTab) -> None:
    _wire_checks(page, tab)
    _wire_run(page, tab)
    _wire_files(page, tab)
    _wire_data(page, tab)
    pick.wire(page, tab)
    wire_first_run(page, tab)
    wire_language(page, tab)


def _wire_checks(page: Page, tab: TrainTab) -> None:
    """Validation and plan on every edit; Auto-fit."""
    board, form = page.board, tab.form

    def on_edit(data):
        lang = data[page.lang_radio]
        check = board.validate(board.values(form.read_map(data)))
        return {
            **form.update_map(check=check, lang=lang, flagged=set(data[tab.flagged] or ())),
            tab.errors: errors_md(check, lang),
            tab.flagged: sorted(check.by_field),
            **pick.start_update(page, tab, check, lang),
        }

    def on_plan(data):
        check = board.validate(board.values(form.read_map(data)))
        return plan_text(page, check, data[tab.gpu], data[tab.gpus], data[page.lang_radio])[0]

    def on_autofit(data):
        lang, values = data[page.lang_radio], board.values(form.read_map(data))
        check = board.validate(values)
        plan, overrides = plan_text(page, check, data[tab.gpu], data[tab.gpus], lang)
        if overrides:
            check = board.validate(dict(values, **overrides))
            if check.ok:
                plan = plan_text(page, check, data[tab.gpu], data[tab.gpus], lang)[0]
                return {
                    **form.update_map(values=board.form_from_config(check.config), check=check, lang=lang),
                    tab.errors: errors_md(check, lang),
                    tab.plan_md: plan,
                }
            return {**form.update_map(check=check, lang=lang), tab.errors: errors_md(check, lang), tab.plan_md: plan}
        return {tab.errors: errors_md(check, lang), tab.plan_md: plan}

    # Validation is instant; the plan may tokenize the data the first time: separate queues, so a slow plan never
    # delays the messages next to the fields or a Start. An edit's one deferring handler is the check; the plan
    # follows it (``.then``), as two deferring handlers of one trigger re-run each other (Guard.on).
    checked = page.on(
        [c.change for c in form.inputs],
        on_edit,
        inputs={form.values, page.lang_radio, tab.flagged},
        outputs=[*form.inputs, tab.errors, tab.flagged, tab.start_btn, tab.start_reason],
        trigger_mode="always_last",
        show_progress="hidden",
        concurrency_id="validate",
        api_visibility="private",
    )
    plan_inputs = {form.values, page.lang_radio, tab.gpu, tab.gpus}
    for trigger in (  # the language: in the new words
        checked.then,
        [tab.gpu.change, tab.gpus.change, tab.plan_btn.click, page.lang_radio.change],
    ):
        page.on(
            trigger,
            on_plan,
            inputs=plan_inputs,
            outputs=tab.plan_md,
            trigger_mode="always_last",
            show_progress="minimal",
            concurrency_id="plan",
            concurrency_limit=1,
            api_visibility="private",
        )
    page.on(
        tab.autofit_btn.click,
        on_autofit,
        inputs=plan_inputs,
        outputs=[*form.inputs, tab.errors, tab.plan_md],
        api_visibility="private",
    )


def _wire_run(page: Page, tab: TrainTab) -> None:
    """Preview the command, start, stop."""
    board, form = page.board, tab.form

    def on_preview(data):
        lang = data[page.lang_radio]
        values, filled, notes = board.fill_run(form.read_map(data), lang)  # output folder, logging (and why)
        check, cmd, yml = board.preview(values, notes=notes)
        return {
            **form.update_map(values=filled, check=check, lang=lang),
            tab.errors: errors_md(check, lang),
            tab.command: cmd,
            tab.yaml: yml,
        }

    def on_start(data):
        lang = data[page.lang_radio]
        values, filled, notes = board.fill_run(form.read_map(data), lang)
        check, cmd, yml = board.preview(values, notes=notes)
        shown = {tab.command: cmd, tab.yaml: yml}
        if board.runner.busy:
            return {
                **form.update_map(check=check, lang=lang),
                tab.errors: f"⚠ {say(Said('board_job_running'), lang)}",
                **shown,
            }
        gate = pick.start_update(page, tab, check, lang)
        if gate[tab.start_reason]:  # the button is off; a client calling the event anyway gets the reason
            return {**form.update_map(check=check, lang=lang), tab.errors: errors_md(check, lang), **shown, **gate}
        try:
            check, _job = board.start_train(values)
        except (OSError, RuntimeError, ValueError) as exc:  # a keyed one (runner.JobBusy) in the page's language
            return {**form.update_map(check=check, lang=lang), tab.errors: f"⚠ {say_error(exc, lang)}", **shown}
        return {
            **form.update_map(values=filled, check=check, lang=lang),
            tab.errors: errors_md(check, lang),
            **shown,
        }

    inputs = {form.values, page.lang_radio}
    outputs = [*form.inputs, tab.errors, tab.command, tab.yaml]
    page.on(tab.preview_btn.click, on_preview, inputs=inputs, outputs=outputs, api_visibility="private")
    start_outputs = [*outputs, tab.start_btn, tab.start_reason]
    page.then_wake(
        page.on(tab.start_btn.click, on_start, inputs=inputs, outputs=start_outputs, api_visibility="private")
    )
    page.then_wake(page.on(tab.stop_btn.click, lambda: board.runner.stop() and None, api_visibility="private"))


def _wire_files(page: Page, tab: TrainTab) -> None:
    """Save and load the form as YAML."""
    board, form = page.board, tab.form

    def on_save(data):
        lang, values = data[page.lang_radio], form.read_map(data)
        check = board.validate(board.values(values))
        if not check.ok:
            return {**form.update_map(check=check, lang=lang), tab.errors: errors_md(check, lang)}
        try:
            saved = board.save_yaml(values, data[tab.config_path], overwrite=bool(data[tab.overwrite]))
        except TunekitError as exc:
            return {**form.update_map(check=check, lang=lang), tab.errors: f"⚠ {safe_message(say_error(exc, lang))}"}
        # each overwrite is asked again
        done = t("config_saved", lang).format(path=saved)
        return {**form.update_map(check=check, lang=lang), tab.errors: done, tab.overwrite: False}

    def on_load(data):
        path, lang = data[tab.config_path], data[page.lang_radio]
        try:
            new_form = board.load_yaml(path)
        except TunekitError as exc:
            return {tab.errors: f"**{t('invalid', lang)}**\n\n```\n{safe_message(say_error(exc, lang))}\n```"}
        check = board.validate(board.values(new_form))
        done = t("config_loaded", lang).format(path=path)
        loaded = {tab.errors: done, tab.auto_template: ""}  # its template is the file's, kept
        return {**form.update_map(values=new_form, check=check, lang=lang), **loaded}

    page.on(
        tab.save_btn.click,
        on_save,
        inputs={form.values, tab.config_path, tab.overwrite, page.lang_radio},
        outputs=[*form.inputs, tab.errors, tab.overwrite],
        api_visibility="private",
    )
    page.on(
        tab.load_btn.click,
        on_load,
        inputs={tab.config_path, page.lang_radio},
        outputs=[*form.inputs, tab.errors, tab.auto_template],
        api_visibility="private",
    )


def _wire_data(page: Page, tab: TrainTab) -> None:
    """Sample preview (the model and data pickers: :mod:`.train_pickers`)."""
    board, form = page.board, tab.form

    def on_samples(data):
        lang = data[page.lang_radio]
        n = int(data[tab.samples_n] or 2)
        check, pieces, samples, note = board.sample_preview_media(form.read_map(data), n, lang)
        thumbs, media = board.sample_media(samples, lang) if samples else ([], "")
        return {
            tab.samples_out: [(text, t(f"samples_piece_{label}", lang) if label else None) for text, label in pieces],
            tab.errors: errors_md(check, lang) if not check.ok else note,
            tab.samples_gallery: gr.Gallery(value=thumbs or None, visible=bool(thumbs)),
            tab.samples_media: media,
        }

    page.on(
        tab.samples_btn.click,
        on_samples,
        inputs={form.values, tab.samples_n, page.lang_radio},
        outputs=[tab.samples_out, tab.errors, tab.samples_gallery, tab.samples_media],
        api_visibility="private",
    )
