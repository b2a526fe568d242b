"""The Train tab's live charts and its first-run defaults.

:func:`chart_updates` turns a job view (``Board.job_view``) into the loss and learning-rate charts the progress
poll sends; :func:`wire_first_run` gives a new page the first-run values (:mod:`tunekit.webui.defaults`) and keeps
the output folder and run name the board named in step with the model, stage and method. ``tab`` is the Train
tab's :class:`~tunekit.webui.tabs.train.TrainTab`.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from ..i18n import t
from . import Page

TRAIN = ("train",)  # the job kind the Train tab shows (its progress, charts and status)
LOSS_COLORS = {"loss": "#1f77b4", "eval_loss": "#ff7f0e"}  # by series (the legend shows its words, prog_<series>)


def chart_titles(lang: str) -> dict[str, dict[str, str]]:
    """The charts' words in ``lang``: their labels, axis titles and the loss chart's legend title."""
    step = t("prog_step", lang)
    return {
        "loss_plot": dict(
            label=t("loss_plot", lang), x_title=step, y_title=t("prog_loss", lang), color_title=t("prog_series", lang)
        ),
        "lr_plot": dict(label=t("lr_plot", lang), x_title=step, y_title=t("lr_plot", lang)),
    }


def run_view(page: Page) -> dict[str, Any]:
    """The run's own area under the command: progress, status, the live charts, the saved loss plot and the log."""
    lang, L = page.lang, page.label
    progress = gr.HTML(page.board.job_view(lang, TRAIN)["html"], elem_id="tk-progress")
    status = gr.Markdown(elem_id="tk-status")
    # Live charts (filled by train_live.chart_updates): numbers against steps, the x axis spanning the whole run.
    # Their words follow the language switch (wire_language).
    words = chart_titles(lang)
    loss_plot = gr.LinePlot(
        x="step", y="value", color="series", elem_id="tk-loss-plot", height=260, **words["loss_plot"]
    )
    lr_plot = gr.LinePlot(
        x="step", y="learning_rate", y_axis_format="~e", elem_id="tk-lr-plot", height=160, **words["lr_plot"]
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
        progress=progress,
        status=status,
        loss_plot=loss_plot,
        lr_plot=lr_plot,
        loss_png=loss_png,
        log=log,
    )


def chart_data(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The live charts of a job view (Board.job_view): loss and eval loss, learning rate, as numbers against steps.

    The x axis spans the run's steps; the colours name the series present, so the series that appears later
    (eval_loss) redraws the chart with its legend, in the page's words (``view["lang"]``). Nothing logged yet: no
    chart rather than an empty one."""
    frame, lr, lang = view["chart"], view["lr_chart"], view.get("lang", "en")
    x_lim = [0, view["total"]] if view.get("total") else None
    present = set(frame["series"])
    colors = {t(f"prog_{s}", lang): c for s, c in LOSS_COLORS.items() if s in present} or None
    if len(frame):  # the legend: loss / eval_loss, 损失 / 验证损失
        frame = frame.assign(series=frame["series"].map(lambda s: t(f"prog_{s}", lang)))
    return {
        "loss_plot": dict(value=frame if len(frame) else None, color_map=colors, x_lim=x_lim),
        "lr_plot": dict(value=lr if len(lr) else None, x_lim=x_lim),
    }


def chart_updates(tab, view: dict[str, Any]) -> dict[Any, Any]:
    """:func:`chart_data` as the progress poll sends it."""
    data = chart_data(view)
    return {tab.loss_plot: gr.LinePlot(**data["loss_plot"]), tab.lr_plot: gr.LinePlot(**data["lr_plot"])}


def wire_language(page: Page, tab) -> None:
    """A language switch re-words the charts: labels, axis titles and the legend of what is drawn already."""

    def on_lang(lang):
        words, data = chart_titles(lang), chart_data(page.board.job_view(lang, TRAIN))
        return {getattr(tab, name): gr.LinePlot(**words[name], **data[name]) for name in ("loss_plot", "lr_plot")}

    page.relabel([tab.loss_plot, tab.lr_plot], on_lang)


def wire_first_run(page: Page, tab) -> None:
    """A new page starts with the first-run values (webui/defaults.py); the output folder and run name the board
    named follow the model, stage and method."""
    board, form = page.board, tab.form
    form.start_with(board.first_run_form(form.comps))  # the page's initial values; the schema's defaults unchanged
    sources = [n for n in ("model_name_or_path", "stage", "finetuning_type") if n in form.comps]
    names = [n for n in ("output_dir", "run_name") if n in form.comps]
    if not sources or not names:
        return

    def on_source(*values):
        fresh = board.run_names(dict(zip(sources + names, values)))
        return [fresh.get(n, gr.skip()) for n in names]

    for name in sources:
        page.on(
            form[name].change,
            on_source,
            inputs=[form[n] for n in sources + names],
            outputs=[form[n] for n in names],
            show_progress="hidden",
            api_visibility="private",
        )
