"""The Evaluate & predict tab: ``tunekit train do_train=false`` from the tab's own fields only (model / adapter /
checkpoint, data, generation options, output folder), its command as run, and its own status, results (loss,
BLEU, ROUGE, ...) and log. Nothing of the Train tab goes into its command unless "Use the Train tab's" copied it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gradio as gr

from tunekit.config.problems import Said
from tunekit.config.secrets import mask_secrets
from tunekit.errors import TunekitError

from ..board import Board
from ..command import command_line
from ..form import FormView
from ..i18n import t
from ..paths import safe_message
from ..problems_zh import say, say_error
from . import Page, errors_md, follow_train_load
from . import jobs as job_area
from . import source as model_source

# The tab's own options (schema fields, so their help and rules are the schema's).
DATA_FIELDS = ("dataset_dir", "eval_dataset", "cutoff_len", "max_samples", "per_device_eval_batch_size")
RUN_FIELDS = ("do_eval", "do_predict", "output_dir")
GEN_FIELDS = ("max_new_tokens", "do_sample", "temperature", "top_p", "top_k", "num_beams", "repetition_penalty")


@dataclass
class EvalTab:
    source: model_source.ModelSource
    data: FormView  # dataset_dir, eval_dataset, cutoff_len, ...
    run: FormView  # do_eval, do_predict, output_dir
    gen: FormView  # generation options (do_predict)
    config_path: Any
    load_btn: Any
    preview_btn: Any
    run_btn: Any
    stop_btn: Any
    command: Any
    errors: Any
    area: job_area.JobArea

    @property
    def forms(self) -> list[FormView]:
        return [self.data, self.run, self.gen]

    @property
    def inputs(self) -> list[Any]:
        """The tab's widgets (what a loaded config sets)."""
        return [*self.source.inputs, *(c for f in self.forms for c in f.inputs)]

    @property
    def reads(self) -> list[Any]:
        """What the tab's handlers take: the model boxes and each form's hidden values (FormView.add_values)."""
        return [*self.source.inputs, *(f.values for f in self.forms)]

    def read(self, data: Mapping[Any, Any]) -> dict[str, Any]:
        """The tab's form as ``{option: value}`` (its own fields only)."""
        return {k: v for f in self.forms for k, v in f.read_map(data).items()}


def _form(page: Page, key: str, names: tuple[str, ...], per_row: int) -> FormView:
    """The named options' widgets, ids ``tk-eval-field-<name>`` (the Train tab has ``tk-field-<name>``); ``key``:
    the form's own in the page's store of form values (FormView.add_values)."""
    by_name = {s.name: s for s in page.board.specs}
    form = FormView([by_name[n] for n in names])
    form.render_flat(page.lang, per_row=per_row, key=key)
    for name, comp in form.comps.items():
        comp.elem_id = f"tk-eval-field-{name}"
    return form


def build(page: Page) -> EvalTab:
    lang, L = page.lang, page.label
    with gr.Tab(t("tab_eval", lang), id="eval", elem_id="tk-tab-eval") as tab:
        L(tab, "tab_eval")
        src = model_source.build(page, "eval")
        data = _form(page, "eval_data", DATA_FIELDS, per_row=5)
        run = _form(page, "eval_run", RUN_FIELDS, per_row=3)
        run.start_with({"do_eval": True})  # the tab's first use: evaluate the loss
        with gr.Accordion(t("sec_infer", lang), open=True, elem_id="tk-eval-gen") as acc:
            L(acc, "sec_infer")
            gen = _form(page, "eval_gen", GEN_FIELDS, per_row=4)
        with gr.Row():
            config_path = L(
                gr.Textbox(label=t("config_path", lang), scale=3, elem_id="tk-eval-config-path"), "config_path"
            )
            load_btn = L(gr.Button(t("load_btn", lang), elem_id="tk-eval-load", scale=1), "load_btn", "value")
        with gr.Row():
            preview_btn = L(gr.Button(t("preview_btn", lang), elem_id="tk-eval-preview"), "preview_btn", "value")
            run_btn = L(gr.Button(t("eval_btn", lang), variant="primary", elem_id="tk-eval-btn"), "eval_btn", "value")
            stop_btn = L(gr.Button(t("stop_btn", lang), variant="stop", elem_id="tk-eval-stop"), "stop_btn", "value")
        command = L(
            gr.Code(
                language="shell", label=t("command", lang), lines=2, max_lines=8, interactive=False,
                elem_id="tk-eval-command", wrap_lines=True,
            ),
            "command",
        )  # fmt: skip
        errors = gr.Markdown(elem_id="tk-eval-errors")
        area = job_area.build(page, "eval", ("eval",), results=True)
    return EvalTab(src, data, run, gen, config_path, load_btn, preview_btn, run_btn, stop_btn, command, errors, area)


def eval_values(board: Board, source: Mapping[str, Any], form: Mapping[str, Any]) -> dict[str, Any]:
    """The ``tunekit train`` options of an evaluation: the tab's model, ``do_train: false``, then the options its
    fields set (schema order); ``output_dir`` a fresh ``saves/<model>/<method>/eval_<time>`` when left empty."""
    vals = {**source, "do_train": False, **board.values(form)}
    if not vals.get("output_dir"):
        vals["output_dir"] = board.default_output_dir(source, "eval")
    return vals


def train_data(train: Mapping[str, Any]) -> dict[str, Any]:
    """The Train tab's data as this tab's fields take it: its eval_dataset, else its training dataset."""
    out = {k: train[k] for k in ("dataset_dir", "cutoff_len") if k in train}
    out["eval_dataset"] = train.get("eval_dataset") or train.get("dataset") or []
    return out


def loaded_values(board: Board, path: str) -> dict[str, Any]:
    """A YAML/JSON config's values for this tab's fields (generation options included); do_eval / do_predict
    only when the file asks for one of them (a training config leaves the ticks as they are)."""
    form = {**board.load_yaml(path), **board.load_yaml(path, "chat")}
    names = (*DATA_FIELDS, *RUN_FIELDS, *GEN_FIELDS, "model_name_or_path", "adapter_name_or_path", "template")
    out = {k: form[k] for k in names if k in form}
    if not (out.get("do_eval") or out.get("do_predict")):
        out.pop("do_eval", None)
        out.pop("do_predict", None)
    return out


def wire(page: Page, tab: EvalTab, train=None, demo=None) -> None:
    """``train``: the Train tab ("Use the Train tab's" reads its form; its Load also sets the generation options)."""
    board, src = page.board, tab.source
    model_source.wire(
        page,
        src,
        train.form if train is not None else None,
        also=lambda values: {tab.data[k]: v for k, v in train_data(values).items()},
        outputs=[tab.data[k] for k in ("dataset_dir", "eval_dataset", "cutoff_len")],
    )
    if train is not None:
        follow_train_load(page, train, tab.gen)

    def prepared(data):
        lang = data[page.lang_radio]
        vals = eval_values(board, src.values(data), tab.read(data))
        check = board.validate(vals)
        if check.ok and not check.config.model_name_or_path:
            return vals, check, f"⚠ {t('src_need_model', lang)}"
        if check.ok and not (check.config.do_eval or check.config.do_predict):
            return vals, check, f"⚠ {t('eval_nothing', lang)}"
        return vals, check, errors_md(check, lang) if not check.ok else ""

    def on_preview(data):
        vals, check, problem = prepared(data)
        return {
            tab.command: command_line(mask_secrets(vals)),
            tab.errors: problem or errors_md(check, data[page.lang_radio]),
        }

    def on_run(data):
        vals, check, problem = prepared(data)
        out = {tab.command: command_line(mask_secrets(vals)), tab.run["output_dir"]: vals["output_dir"]}
        if problem:
            return {**out, tab.errors: problem}
        if board.runner.busy:
            return {**out, tab.errors: f"⚠ {say(Said('board_job_running'), data[page.lang_radio])}"}
        board.start_job("train", vals, vals["output_dir"], kind="eval")
        return {**out, tab.errors: ""}

    def on_load(data):
        lang = data[page.lang_radio]
        try:
            got = loaded_values(board, data[tab.config_path])
        except TunekitError as exc:
            return {tab.errors: f"**{t('invalid', lang)}**\n\n```\n{safe_message(say_error(exc, lang))}\n```"}
        return {**fill(tab, got), tab.errors: f"✓ {t('loaded', lang)} {data[tab.config_path]}"}

    inputs = {*tab.reads, page.lang_radio}
    page.on(
        tab.preview_btn.click, on_preview, inputs=inputs, outputs=[tab.command, tab.errors], api_visibility="private"
    )
    job_area.then_wake(
        page,
        tab.area,
        page.on(
            tab.run_btn.click,
            on_run,
            inputs=inputs,
            outputs=[tab.command, tab.run["output_dir"], tab.errors],
            api_visibility="private",
        ),
    )
    page.on(
        tab.load_btn.click,
        on_load,
        inputs={tab.config_path, page.lang_radio},
        outputs=[*tab.inputs, tab.errors],
        api_visibility="private",
    )
    _wire_datasets(page, tab, demo)
    job_area.wire(page, tab.area, demo, stop=tab.stop_btn)


def fill(tab: EvalTab, values: Mapping[str, Any]) -> dict[Any, Any]:
    """``{component: value}`` setting the tab's fields to ``values`` (options by name)."""
    src = tab.source
    boxes = {"model_name_or_path": src.model, "adapter_name_or_path": src.adapter, "template": src.template}
    out = {boxes[k]: values[k] or "" for k in boxes if k in values}
    for form in tab.forms:
        out.update({form[k]: v for k, v in values.items() if k in form.comps})
    return out


def _wire_datasets(page: Page, tab: EvalTab, demo) -> None:
    """The eval_dataset picker lists the tab's own dataset_dir (on a change, and when the page opens)."""
    board, folder, picker = page.board, tab.data["dataset_dir"], tab.data["eval_dataset"]

    def names(dataset_dir):
        return gr.update(choices=board.dataset_names(dataset_dir))

    page.on(folder.change, names, inputs=folder, outputs=picker, api_visibility="private")
    if demo is not None:
        page.on(demo.load, names, inputs=folder, outputs=picker, api_visibility="private")
