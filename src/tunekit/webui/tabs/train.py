"""The Train tab: the form (basic options, the rest under "Advanced"), data preview, memory plan,
command and YAML preview, save / load, start / stop and the run's progress."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from tunekit.errors import TunekitError

from .. import backend as adapters
from ..board import format_plan
from ..form import FormView
from ..i18n import t
from ..paths import safe_message
from ..sections import BASIC_FIELDS
from ..validation import Validation
from . import Page, errors_md


@dataclass
class TrainTab:
    form: FormView
    ds_refresh: Any
    samples_n: Any
    samples_btn: Any
    samples_out: Any
    samples_gallery: Any  # thumbnails of the previewed samples' images
    samples_media: Any  # their images / videos / audios and media token counts
    config_path: Any
    overwrite: Any
    save_btn: Any
    load_btn: Any
    preview_btn: Any
    start_btn: Any
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
            color_map={"trained": "green", "media": "blue"},
            show_legend=True,
            combine_adjacent=True,
            elem_id="tk-samples-out",
            show_label=False,
        )
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
    return dict(
        flagged=flagged,
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
        start_btn = L(gr.Button(t("start_btn", lang), variant="primary", elem_id="tk-start"), "start_btn", "value")
        stop_btn = L(gr.Button(t("stop_btn", lang), variant="stop", elem_id="tk-stop"), "stop_btn", "value")
    errors = gr.Markdown(elem_id="tk-errors")
    with gr.Accordion(t("plan_title", lang), open=True, elem_id="tk-plan") as plan_acc:
        L(plan_acc, "plan_title")
        with gr.Row():
            gpu_choices = [(t("plan_no_gpu", lang), adapters.NO_GPU)] + [(n, n) for n in adapters.gpu_choices()]
            gpu = L(
                gr.Dropdown(
                    choices=gpu_choices,
                    value=adapters.detected_gpu(),
                    label=t("plan_gpu", lang),
                    allow_custom_value=True,
                    elem_id="tk-plan-gpu",
                ),
                "plan_gpu",
            )
            gpus = L(gr.Number(value=1, precision=0, label=t("plan_gpus", lang), elem_id="tk-plan-gpus"), "plan_gpus")
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
    progress = gr.HTML(page.board.job_view(lang)["html"], elem_id="tk-progress")
    status = gr.Markdown(elem_id="tk-status")
    loss_plot = L(
        gr.LinePlot(
            x="step", y="value", color="series", label=t("loss_plot", lang), elem_id="tk-loss-plot", height=260
        ),
        "loss_plot",
    )
    loss_png = L(
        gr.Image(label=t("loss_png", lang), type="filepath", elem_id="tk-loss-png", interactive=False, height=260),
        "loss_png",
    )
    log = L(
        gr.Textbox(label=t("log", lang), lines=10, max_lines=10, interactive=False, elem_id="tk-log", autoscroll=True),
        "log",
    )
    return dict(
        preview_btn=preview_btn,
        start_btn=start_btn,
        stop_btn=stop_btn,
        errors=errors,
        gpu=gpu,
        gpus=gpus,
        plan_md=plan_md,
        plan_btn=plan_btn,
        autofit_btn=autofit_btn,
        command=command,
        yaml=yaml,
        progress=progress,
        status=status,
        loss_plot=loss_plot,
        loss_png=loss_png,
        log=log,
    )


# ---------------------------------------------------------------- handlers
def plan_text(page: Page, check: Validation, gpu, n_gpus, lang: str) -> tuple[str, dict]:
    """The plan as Markdown, and the overrides Auto-fit would apply."""
    if not check.ok:
        return "", {}
    if not check.config.model_name_or_path:
        return t("plan_need_model", lang), {}
    try:
        plan = adapters.make_plan(check.config, gpu or None, n_gpus or 1)
    except TunekitError as exc:
        return f"⚠ {exc}", {}
    except Exception as exc:  # the planner cannot read this model yet: say so, keep the board usable
        return f"⚠ plan unavailable: {type(exc).__name__}: {exc}", {}
    return format_plan(plan, lang), dict(plan.get("overrides") or {})


def wire(page: Page, tab: TrainTab) -> None:
    _wire_checks(page, tab)
    _wire_run(page, tab)
    _wire_files(page, tab)
    _wire_data(page, tab)


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

    edits = [c.change for c in form.inputs]
    # Validation is instant; the plan may tokenize the data the first time: separate queues, so a
    # slow plan never delays the messages next to the fields or a Start.
    gr.on(
        edits,
        on_edit,
        inputs={*form.inputs, page.lang_radio, tab.flagged},
        outputs=[*form.inputs, tab.errors, tab.flagged],
        trigger_mode="always_last",
        show_progress="hidden",
        concurrency_id="validate",
        api_visibility="private",
    )
    plan_inputs = {*form.inputs, page.lang_radio, tab.gpu, tab.gpus}
    gr.on(
        edits + [tab.gpu.change, tab.gpus.change, tab.plan_btn.click],
        on_plan,
        inputs=plan_inputs,
        outputs=tab.plan_md,
        trigger_mode="always_last",
        show_progress="minimal",
        concurrency_id="plan",
        concurrency_limit=1,
        api_visibility="private",
    )
    tab.autofit_btn.click(
        on_autofit, inputs=plan_inputs, outputs=[*form.inputs, tab.errors, tab.plan_md], api_visibility="private"
    )


def _wire_run(page: Page, tab: TrainTab) -> None:
    """Preview the command, start, stop."""
    board, form = page.board, tab.form

    def on_preview(data):
        lang, values = data[page.lang_radio], board.with_output_dir(form.read_map(data))
        check, cmd, yml = board.preview(values)
        return {
            **form.update_map(values={"output_dir": values.get("output_dir")}, check=check, lang=lang),
            tab.errors: errors_md(check, lang),
            tab.command: cmd,
            tab.yaml: yml,
        }

    def on_start(data):
        lang, values = data[page.lang_radio], board.with_output_dir(form.read_map(data))
        check, cmd, yml = board.preview(values)
        shown = {tab.command: cmd, tab.yaml: yml}
        if board.runner.busy:
            return {**form.update_map(check=check, lang=lang), tab.errors: f"⚠ {t('busy', lang)}", **shown}
        try:
            check, _job = board.start_train(values)
        except (OSError, RuntimeError, ValueError) as exc:
            return {**form.update_map(check=check, lang=lang), tab.errors: f"⚠ {exc}", **shown}
        return {
            **form.update_map(values={"output_dir": values.get("output_dir")}, check=check, lang=lang),
            tab.errors: errors_md(check, lang),
            **shown,
        }

    inputs = {*form.inputs, page.lang_radio}
    outputs = [*form.inputs, tab.errors, tab.command, tab.yaml]
    tab.preview_btn.click(on_preview, inputs=inputs, outputs=outputs, api_visibility="private")
    page.then_wake(tab.start_btn.click(on_start, inputs=inputs, outputs=outputs, api_visibility="private"))
    page.then_wake(tab.stop_btn.click(lambda: board.runner.stop() and None, api_visibility="private"))


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
            return {**form.update_map(check=check, lang=lang), tab.errors: f"⚠ {safe_message(str(exc))}"}
        # each overwrite is asked again
        return {**form.update_map(check=check, lang=lang), tab.errors: f"✓ saved {saved}", tab.overwrite: False}

    def on_load(data):
        path, lang = data[tab.config_path], data[page.lang_radio]
        try:
            new_form = board.load_yaml(path)
        except TunekitError as exc:
            return {tab.errors: f"**{t('invalid', lang)}**\n\n```\n{safe_message(str(exc))}\n```"}
        check = board.validate(board.values(new_form))
        return {**form.update_map(values=new_form, check=check, lang=lang), tab.errors: f"✓ loaded {path}"}

    tab.save_btn.click(
        on_save,
        inputs={*form.inputs, tab.config_path, tab.overwrite, page.lang_radio},
        outputs=[*form.inputs, tab.errors, tab.overwrite],
        api_visibility="private",
    )
    tab.load_btn.click(
        on_load,
        inputs={tab.config_path, page.lang_radio},
        outputs=[*form.inputs, tab.errors],
        api_visibility="private",
    )


def _wire_data(page: Page, tab: TrainTab) -> None:
    """Sample preview; the template picked from the model folder when it ships a chat template."""
    board, form = page.board, tab.form

    def on_samples(data):
        lang = data[page.lang_radio]
        check, pieces, samples, note = board.sample_preview_media(form.read_map(data), int(data[tab.samples_n] or 2))
        thumbs, media = board.sample_media(samples, lang) if samples else ([], "")
        return {
            tab.samples_out: pieces,
            tab.errors: errors_md(check, lang) if not check.ok else note,
            tab.samples_gallery: gr.Gallery(value=thumbs or None, visible=bool(thumbs)),
            tab.samples_media: media,
        }

    tab.samples_btn.click(
        on_samples,
        inputs={*form.inputs, tab.samples_n, page.lang_radio},
        outputs=[tab.samples_out, tab.errors, tab.samples_gallery, tab.samples_media],
        api_visibility="private",
    )

    if "model_name_or_path" in form.comps and "template" in form.comps:

        def on_model(model, template):
            if template or not board.model_chat_template(model):
                return gr.skip()
            return "jinja"  # the model's own chat template (tokenizer_config.json / chat_template.jinja)

        form["model_name_or_path"].change(
            on_model,
            inputs=[form["model_name_or_path"], form["template"]],
            outputs=form["template"],
            api_visibility="private",
        )
