"""The Gradio board: Train (form, data preview, plan, command, start/stop, progress), Evaluate &
predict, Chat and Export tabs, in English or Chinese.

Widgets only: what they do lives in :class:`tunekit.webui.board.Board`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gradio as gr

from tunekit.errors import TunekitError

from . import adapters
from .board import Board, format_plan
from .form import FormView
from .i18n import LANG_LABELS, t
from .paths import safe_message
from .validation import Validation

CSS = """
.tk-invalid { border: 2px solid #d33 !important; border-radius: 6px; }
.tk-invalid [data-testid="block-info"], .tk-invalid .info { color: #d33 !important; }
.tk-progress { position: relative; height: 28px; background: #eee; border-radius: 6px; overflow: hidden; }
.tk-progress .tk-bar { position: absolute; inset: 0 auto 0 0; background: #4caf50; transition: width .5s; }
.tk-progress span { position: relative; padding-left: 10px; line-height: 28px; font-family: monospace; }
#tk-errors { color: #d33; }
"""


def _errors_md(check: Validation | None, lang: str) -> str:
    if check is None or check.ok:
        return "" if check is None else f"✓ {t('valid', lang)}"
    return f"**{t('invalid', lang)}**\n\n```\n{check.message}\n```"


def create_app(board: Board | None = None, lang: str = "en") -> gr.Blocks:
    """Build the board (not launched). One :class:`Board` (job slot, chat model) per app."""
    board = board or Board()
    texts: list[tuple[Any, str, str]] = []  # (component, text key, property) re-labelled on a language switch

    def L(comp, key: str, prop: str = "label"):
        texts.append((comp, key, prop))
        return comp

    templates = adapters.template_names()
    gpus = adapters.gpu_choices()

    with gr.Blocks(title="tunekit board", analytics_enabled=False) as demo:
        with gr.Row():
            title = L(gr.Markdown(f"## {t('title', lang)}\n{t('subtitle', lang)}", elem_id="tk-title"), "title", "value")
            lang_radio = gr.Radio(choices=[(v, k) for k, v in LANG_LABELS.items()], value=lang, label="Language / 语言",
                                  elem_id="tk-lang", scale=0, min_width=200)

        with gr.Tabs(elem_id="tk-tabs"):
            # ============================================================ Train
            with gr.Tab(t("tab_train", lang), id="train", elem_id="tk-tab-train") as tab_train:
                L(tab_train, "tab_train")
                with gr.Row():
                    with gr.Column(scale=3):
                        form = FormView(board.tab_specs("train"))
                        form.render(lang, "train", templates)
                        with gr.Accordion(t("samples_out", lang), open=True, elem_id="tk-samples") as samples_acc:
                            L(samples_acc, "samples_out")
                            with gr.Row():
                                ds_refresh = L(gr.Button(t("datasets_refresh", lang), size="sm", elem_id="tk-ds-refresh"), "datasets_refresh", "value")
                                samples_n = L(gr.Number(value=2, precision=0, label=t("samples_n", lang), elem_id="tk-samples-n"), "samples_n")
                                samples_btn = L(gr.Button(t("samples_btn", lang), size="sm", elem_id="tk-samples-btn"), "samples_btn", "value")
                            samples_out = gr.HighlightedText(color_map={"trained": "green"}, show_legend=True,
                                                             combine_adjacent=True, elem_id="tk-samples-out", show_label=False)
                        with gr.Row():
                            config_path = L(gr.Textbox(value="saves/webui_config.yaml", label=t("config_path", lang), scale=3,
                                                       elem_id="tk-config-path"), "config_path")
                            overwrite_box = L(gr.Checkbox(value=False, label=t("overwrite", lang), elem_id="tk-overwrite",
                                                          scale=1, min_width=100), "overwrite")
                            save_btn = L(gr.Button(t("save_btn", lang), elem_id="tk-save", scale=1), "save_btn", "value")
                            load_btn = L(gr.Button(t("load_btn", lang), elem_id="tk-load", scale=1), "load_btn", "value")
                    with gr.Column(scale=2, elem_id="tk-side"):
                        with gr.Row():
                            preview_btn = L(gr.Button(t("preview_btn", lang), elem_id="tk-preview"), "preview_btn", "value")
                            start_btn = L(gr.Button(t("start_btn", lang), variant="primary", elem_id="tk-start"), "start_btn", "value")
                            stop_btn = L(gr.Button(t("stop_btn", lang), variant="stop", elem_id="tk-stop"), "stop_btn", "value")
                        errors_md = gr.Markdown(elem_id="tk-errors")
                        with gr.Accordion(t("plan_title", lang), open=True, elem_id="tk-plan") as plan_acc:
                            L(plan_acc, "plan_title")
                            with gr.Row():
                                gpu_dd = L(gr.Dropdown(choices=gpus, value=gpus[0] if gpus else None, label=t("plan_gpu", lang),
                                                       allow_custom_value=True, elem_id="tk-plan-gpu"), "plan_gpu")
                                gpus_num = L(gr.Number(value=1, precision=0, label=t("plan_gpus", lang), elem_id="tk-plan-gpus"), "plan_gpus")
                            plan_md = gr.Markdown(elem_id="tk-plan-out")
                            with gr.Row():
                                plan_btn = L(gr.Button(t("plan_btn", lang), elem_id="tk-plan-btn", size="sm"), "plan_btn", "value")
                                autofit_btn = L(gr.Button(t("autofit_btn", lang), elem_id="tk-autofit", size="sm"), "autofit_btn", "value")
                        command_code = L(gr.Code(language="shell", label=t("command", lang), lines=2, max_lines=8, interactive=False,
                                                 elem_id="tk-command", wrap_lines=True), "command")
                        yaml_code = L(gr.Code(language="yaml", label=t("yaml", lang), lines=4, max_lines=16, interactive=False,
                                              elem_id="tk-yaml"), "yaml")
                        progress = gr.HTML(board.job_view(lang)["html"], elem_id="tk-progress")
                        status_md = gr.Markdown(elem_id="tk-status")
                        loss_plot = L(gr.LinePlot(x="step", y="value", color="series", label=t("loss_plot", lang),
                                                  elem_id="tk-loss-plot", height=260), "loss_plot")
                        loss_png = L(gr.Image(label=t("loss_png", lang), type="filepath", elem_id="tk-loss-png",
                                              interactive=False, height=260), "loss_png")
                        log_box = L(gr.Textbox(label=t("log", lang), lines=10, max_lines=10, interactive=False,
                                               elem_id="tk-log", autoscroll=True), "log")

            # ============================================================ Evaluate & predict
            with gr.Tab(t("tab_eval", lang), id="eval", elem_id="tk-tab-eval") as tab_eval:
                L(tab_eval, "tab_eval")
                with gr.Row():
                    eval_adapter = L(gr.Textbox(label=t("chat_adapter", lang), elem_id="tk-eval-adapter"), "chat_adapter")
                    eval_dataset = gr.Dropdown(choices=[], multiselect=True, allow_custom_value=True, label="eval_dataset",
                                               elem_id="tk-eval-dataset")
                    eval_out = L(gr.Textbox(label=t("eval_output_dir", lang), elem_id="tk-eval-out"), "eval_output_dir")
                with gr.Row():
                    do_eval = L(gr.Checkbox(value=True, label=t("eval_do_eval", lang), elem_id="tk-do-eval"), "eval_do_eval")
                    do_predict = L(gr.Checkbox(value=False, label=t("eval_do_predict", lang), elem_id="tk-do-predict"), "eval_do_predict")
                    eval_btn = L(gr.Button(t("eval_btn", lang), variant="primary", elem_id="tk-eval-btn"), "eval_btn", "value")
                eval_cmd = L(gr.Code(language="shell", label=t("command", lang), lines=2, max_lines=8, interactive=False,
                                     elem_id="tk-eval-command", wrap_lines=True), "command")
                eval_errors = gr.Markdown(elem_id="tk-eval-errors")
                eval_status = gr.Markdown(elem_id="tk-eval-status")
                eval_results = L(gr.JSON(label=t("eval_results", lang), elem_id="tk-eval-results"), "eval_results")

            # ============================================================ Chat
            with gr.Tab(t("tab_chat", lang), id="chat", elem_id="tk-tab-chat") as tab_chat:
                L(tab_chat, "tab_chat")
                with gr.Row():
                    chat_model = L(gr.Textbox(label=t("chat_model", lang), elem_id="tk-chat-model"), "chat_model")
                    chat_adapter = L(gr.Textbox(label=t("chat_adapter", lang), elem_id="tk-chat-adapter"), "chat_adapter")
                    chat_template = L(gr.Dropdown(choices=[("(none)", "")] + [(n, n) for n in templates], value="",
                                                  allow_custom_value=True, label=t("chat_template", lang),
                                                  elem_id="tk-chat-template"), "chat_template")
                with gr.Row():
                    chat_use_trained = gr.Button("← Train", size="sm", elem_id="tk-chat-use-trained")
                    chat_load = L(gr.Button(t("chat_load", lang), variant="primary", elem_id="tk-chat-load"), "chat_load", "value")
                    chat_unload = L(gr.Button(t("chat_unload", lang), elem_id="tk-chat-unload"), "chat_unload", "value")
                chat_info = gr.Markdown(elem_id="tk-chat-info")
                infer_form = FormView(board.tab_specs("chat"))
                with gr.Accordion(t("sec_infer", lang), open=False, elem_id="tk-section-infer") as infer_acc:
                    L(infer_acc, "sec_infer")
                    infer_form.render_flat(lang)
                chat_system = L(gr.Textbox(label=t("chat_system", lang), elem_id="tk-chat-system"), "chat_system")
                chatbot = L(gr.Chatbot(label=t("chat_box", lang), elem_id="tk-chatbot", height=360), "chat_box")
                with gr.Row():
                    chat_input = L(gr.Textbox(label=t("chat_input", lang), scale=4, elem_id="tk-chat-input"), "chat_input")
                    chat_send = L(gr.Button(t("chat_send", lang), variant="primary", scale=1, elem_id="tk-chat-send"), "chat_send", "value")
                    chat_clear = L(gr.Button(t("chat_clear", lang), scale=1, elem_id="tk-chat-clear"), "chat_clear", "value")

            # ============================================================ Export
            with gr.Tab(t("tab_export", lang), id="export", elem_id="tk-tab-export") as tab_export:
                L(tab_export, "tab_export")
                with gr.Row():
                    exp_model = L(gr.Textbox(label=t("export_model", lang), elem_id="tk-export-model"), "export_model")
                    exp_adapter = L(gr.Textbox(label=t("export_adapter", lang), elem_id="tk-export-adapter"), "export_adapter")
                    exp_template = L(gr.Dropdown(choices=[("(none)", "")] + [(n, n) for n in templates], value="",
                                                 allow_custom_value=True, label=t("chat_template", lang),
                                                 elem_id="tk-export-template"), "chat_template")
                export_form = FormView(board.tab_specs("export"))
                export_form.render_flat(lang)
                with gr.Row():
                    exp_use_trained = gr.Button("← Train", size="sm", elem_id="tk-export-use-trained")
                    exp_btn = L(gr.Button(t("export_btn", lang), variant="primary", elem_id="tk-export-btn"), "export_btn", "value")
                exp_cmd = L(gr.Code(language="shell", label=t("command", lang), lines=2, max_lines=8, interactive=False,
                                    elem_id="tk-export-command", wrap_lines=True), "command")
                exp_errors = gr.Markdown(elem_id="tk-export-errors")
                exp_log = L(gr.Textbox(label=t("export_log", lang), lines=8, interactive=False, elem_id="tk-export-log"), "export_log")

        timer = gr.Timer(1.0, active=False)  # polls only while a job runs (see wake / on_tick)
        view_sig = gr.State(None)
        flagged_state = gr.State([])  # fields shown as invalid on this page

        # ---------------------------------------------------------------- helpers
        n_form = len(form.inputs)

        def split(args):
            return form.read(args[:n_form]), args[n_form:]

        def plan_text(check: Validation, gpu, n_gpus, lang_):
            if not adapters.planner_available():
                return t("plan_none", lang_), {}
            if not check.ok:
                return "", {}
            if not check.config.model_name_or_path:
                return t("plan_need_model", lang_), {}
            try:
                plan = adapters.make_plan(check.config, gpu, n_gpus or 1)
            except TunekitError as exc:
                return f"⚠ {exc}", {}
            except Exception as exc:  # the planner cannot read this model yet: say so, keep the board usable
                return f"⚠ plan unavailable: {type(exc).__name__}: {exc}", {}
            return format_plan(plan, lang_), dict(plan.get("overrides") or {})

        # ---------------------------------------------------------------- train: validate + plan on every edit
        def on_edit(*args):
            values, (lang_, flagged) = split(args)
            check = board.validate(board.values(values))
            return [*form.updates(check=check, lang=lang_, flagged=set(flagged or ())), _errors_md(check, lang_),
                    sorted(check.by_field)]

        def on_plan(*args):
            values, (lang_, gpu, n_gpus) = split(args)
            return plan_text(board.validate(board.values(values)), gpu, n_gpus, lang_)[0]

        edit_inputs = [*form.inputs, lang_radio, gpu_dd, gpus_num]
        # Validation is instant; the plan may tokenize the data the first time: separate queues, so a
        # slow plan never delays the messages next to the fields or a Start.
        gr.on([c.change for c in form.inputs], on_edit, inputs=[*form.inputs, lang_radio, flagged_state],
              outputs=[*form.inputs, errors_md, flagged_state], trigger_mode="always_last", show_progress="hidden",
              concurrency_id="validate", api_visibility="private")
        gr.on([c.change for c in form.inputs] + [gpu_dd.change, gpus_num.change, plan_btn.click], on_plan,
              inputs=edit_inputs, outputs=plan_md, trigger_mode="always_last", show_progress="minimal",
              concurrency_id="plan", concurrency_limit=1, api_visibility="private")

        def on_autofit(*args):
            values, (lang_, gpu, n_gpus) = split(args)
            check = board.validate(board.values(values))
            plan, overrides = plan_text(check, gpu, n_gpus, lang_)
            if not overrides:
                return [*form.updates(), _errors_md(check, lang_), plan]
            merged = dict(board.values(values), **overrides)
            check2 = board.validate(merged)
            if check2.ok:
                new_form = board.form_from_config(check2.config)
                plan, _ = plan_text(check2, gpu, n_gpus, lang_)
                return [*form.updates(values=new_form, check=check2, lang=lang_), _errors_md(check2, lang_), plan]
            return [*form.updates(check=check2, lang=lang_), _errors_md(check2, lang_), plan]

        autofit_btn.click(on_autofit, inputs=edit_inputs, outputs=[*form.inputs, errors_md, plan_md], api_visibility="private")

        # ---------------------------------------------------------------- preview / start / stop
        def on_preview(*args):
            values, (lang_,) = split(args)
            values = board.with_output_dir(values)
            check, cmd, yml = board.preview(values)
            return [*form.updates(values={"output_dir": values.get("output_dir")}, check=check, lang=lang_),
                    _errors_md(check, lang_), cmd, yml]

        preview_btn.click(on_preview, inputs=[*form.inputs, lang_radio],
                          outputs=[*form.inputs, errors_md, command_code, yaml_code], api_visibility="private")

        def on_start(*args):
            values, (lang_,) = split(args)
            values = board.with_output_dir(values)
            check, cmd, yml = board.preview(values)
            if board.runner.busy:
                return [*form.updates(check=check, lang=lang_), f"⚠ {t('busy', lang_)}", cmd, yml]
            try:
                check, _job = board.start_train(values)
            except (OSError, RuntimeError, ValueError) as exc:
                return [*form.updates(check=check, lang=lang_), f"⚠ {exc}", cmd, yml]
            return [*form.updates(values={"output_dir": values.get("output_dir")}, check=check, lang=lang_),
                    _errors_md(check, lang_), cmd, yml]

        def wake():
            """Start polling when there is a job to show (it stops itself once the job has ended)."""
            return gr.Timer(active=board.runner.poll() is not None)

        start_btn.click(on_start, inputs=[*form.inputs, lang_radio],
                        outputs=[*form.inputs, errors_md, command_code, yaml_code], api_visibility="private"
                        ).then(wake, outputs=timer, api_visibility="private")
        stop_btn.click(lambda: board.runner.stop() and None, api_visibility="private").then(
            wake, outputs=timer, api_visibility="private")

        # ---------------------------------------------------------------- save / load
        def on_save(*args):
            values, (path, overwrite, lang_) = split(args)
            check = board.validate(board.values(values))
            if not check.ok:
                return [*form.updates(check=check, lang=lang_), _errors_md(check, lang_), gr.skip()]
            try:
                saved = board.save_yaml(values, path, overwrite=bool(overwrite))
            except TunekitError as exc:
                return [*form.updates(check=check, lang=lang_), f"⚠ {safe_message(str(exc))}", gr.skip()]
            return [*form.updates(check=check, lang=lang_), f"✓ saved {saved}", False]  # each overwrite is asked again

        save_btn.click(on_save, inputs=[*form.inputs, config_path, overwrite_box, lang_radio],
                       outputs=[*form.inputs, errors_md, overwrite_box], api_visibility="private")

        def on_load(path, lang_):
            try:
                new_form = board.load_yaml(path)
            except TunekitError as exc:
                return [*form.updates(), f"**{t('invalid', lang_)}**\n\n```\n{safe_message(str(exc))}\n```"]
            check = board.validate(board.values(new_form))
            return [*form.updates(values=new_form, check=check, lang=lang_), f"✓ loaded {path}"]

        load_btn.click(on_load, inputs=[config_path, lang_radio], outputs=[*form.inputs, errors_md], api_visibility="private")

        # ---------------------------------------------------------------- datasets and samples
        def on_dataset_dir(dataset_dir):
            names = board.dataset_names(dataset_dir)
            return gr.update(choices=names), gr.update(choices=names)

        ds_outputs = [form["dataset"], eval_dataset] if "dataset" in form.comps else [eval_dataset, eval_dataset]
        if "dataset_dir" in form.comps:
            form["dataset_dir"].change(on_dataset_dir, inputs=form["dataset_dir"], outputs=ds_outputs, api_visibility="private")
            ds_refresh.click(on_dataset_dir, inputs=form["dataset_dir"], outputs=ds_outputs, api_visibility="private")
            if "eval_dataset" in form.comps:
                form["dataset_dir"].change(lambda d: gr.update(choices=board.dataset_names(d)),
                                           inputs=form["dataset_dir"], outputs=form["eval_dataset"], api_visibility="private")

        def on_samples(*args):
            values, (n, lang_) = split(args)
            check, pieces, note = board.sample_preview(values, int(n or 2))
            return pieces, (_errors_md(check, lang_) if not check.ok else note)

        samples_btn.click(on_samples, inputs=[*form.inputs, samples_n, lang_radio], outputs=[samples_out, errors_md],
                          api_visibility="private")

        # ---------------------------------------------------------------- progress (polled; survives a refresh)
        def on_tick(sig, lang_):
            """Send only what changed since this page's last tick (re-rendering a plot every second is costly)."""
            view = board.job_view(lang_)
            new = view["signature"]
            done = view["state"] not in ("running", "stopping")
            if new == sig:
                return [gr.skip()] * 8 + [sig, gr.Timer(active=False) if done else gr.skip()]
            import pandas as pd

            def changed(i: int) -> bool:  # signature parts: (job, state, records, log size, png)
                return sig is None or new[:2] != sig[:2] or len(new) < 5 or len(sig) < 5 or new[i] != sig[i]

            kind = view["kind"]
            train_like = kind != "export"
            frame = pd.DataFrame(view["points"], columns=["step", "value", "series"])
            return [
                view["html"] if train_like and changed(2) else gr.skip(),
                view["status"] if train_like else gr.skip(),
                frame if train_like and changed(2) else gr.skip(),
                view["png"] if train_like and changed(4) else gr.skip(),
                view["log"] if train_like and changed(3) else gr.skip(),
                view["log"] if kind == "export" and changed(3) else gr.skip(),
                view["status"] if kind == "eval" else gr.skip(),
                view["results"] if kind == "eval" and view["results"] else gr.skip(),
                new,
                gr.skip(),  # one more tick after the end: it finds nothing new and stops the timer
            ]

        timer.tick(on_tick, inputs=[view_sig, lang_radio],
                   outputs=[progress, status_md, loss_plot, loss_png, log_box, exp_log, eval_status, eval_results, view_sig, timer],
                   show_progress="hidden", api_visibility="private")

        def on_page_load(lang_):
            """A refreshed page shows the form of the job that is running (or ran) on this board."""
            job = board.runner.poll()
            names = board.dataset_names(job.form.get("dataset_dir") if job and job.form else
                                           board.defaults().get("dataset_dir"))
            ds_update = gr.update(choices=names)
            if job is None or job.kind not in ("train", "eval") or not job.form:
                return [*form.updates(), ds_update, None, gr.skip(), gr.skip()]
            restored = {k: v for k, v in job.form.items() if k in form.comps}
            _check, cmd, yml = board.preview(restored)
            return [*form.updates(values=restored), ds_update, None, cmd, yml]

        demo.load(on_page_load, inputs=[lang_radio], outputs=[*form.inputs, eval_dataset, view_sig, command_code, yaml_code],
                  api_visibility="private").then(wake, outputs=timer, api_visibility="private")

        # ---------------------------------------------------------------- evaluate & predict
        def eval_values(args):
            values, (adapter, datasets, out, ev, pred, lang_) = split(args)
            return board.eval_values(values, adapter, datasets, out, bool(ev), bool(pred)), lang_

        eval_inputs = [*form.inputs, eval_adapter, eval_dataset, eval_out, do_eval, do_predict, lang_radio]

        def on_eval(*args):
            from .command import command_line
            from tunekit.config.secrets import mask_secrets

            vals, lang_ = eval_values(args)
            check = board.validate(vals)
            cmd = command_line(mask_secrets(vals))
            if not check.ok:
                return _errors_md(check, lang_), cmd, vals["output_dir"]
            if board.runner.busy:
                return f"⚠ {t('busy', lang_)}", cmd, vals["output_dir"]
            board.start_job("train", vals, vals["output_dir"], kind="eval")
            return "", cmd, vals["output_dir"]

        eval_btn.click(on_eval, inputs=eval_inputs, outputs=[eval_errors, eval_cmd, eval_out], api_visibility="private"
                       ).then(wake, outputs=timer, api_visibility="private")

        def use_trained(model, template, output_dir):
            job = board.runner.poll()
            adapter = str(job.output_dir) if job and job.kind == "train" else (output_dir or "")
            return model or "", adapter, template or ""

        for outs, btn in (((chat_model, chat_adapter, chat_template), chat_use_trained),
                          ((exp_model, exp_adapter, exp_template), exp_use_trained)):
            btn.click(use_trained, inputs=[form["model_name_or_path"], form["template"], form["output_dir"]],
                      outputs=list(outs), api_visibility="private")

        # ---------------------------------------------------------------- chat
        n_infer = len(infer_form.inputs)

        def chat_config(model, adapter, template, infer_args):
            vals = {"model_name_or_path": model or None, "template": template or None}
            if adapter:
                vals["adapter_name_or_path"] = adapter
            vals.update(board.values(infer_form.read(infer_args)))
            return board.validate({k: v for k, v in vals.items() if v is not None})

        def on_chat_load(model, adapter, template, *infer_args):
            check = chat_config(model, adapter, template, infer_args)
            if not check.ok:
                return f"⚠ {check.message}"
            if not check.config.model_name_or_path:
                return "⚠ set the model folder first"
            try:
                desc = board.chat.load(check.config)
            except TunekitError as exc:
                return f"⚠ {exc}"
            except Exception as exc:  # noqa: BLE001 - show any load failure in the board
                return f"⚠ could not load the model: {type(exc).__name__}: {exc}"
            return f"✓ loaded {desc}"

        chat_load.click(on_chat_load, inputs=[chat_model, chat_adapter, chat_template, *infer_form.inputs],
                        outputs=chat_info, api_visibility="private")
        chat_unload.click(lambda: (board.chat.unload(), "unloaded")[1], outputs=chat_info, api_visibility="private")

        def on_send(message, history, system, *infer_args):
            history = list(history or [])
            if not message:
                yield history, ""
                return
            if not board.chat.loaded:
                history += [{"role": "user", "content": message},
                            {"role": "assistant", "content": "⚠ load a model first"}]
                yield history, ""
                return
            gen = {k: v for k, v in board.values(infer_form.read(infer_args)).items()
                   if k in ("do_sample", "temperature", "top_p", "top_k", "max_new_tokens", "repetition_penalty",
                            "num_beams", "length_penalty")}
            messages = [{"role": m["role"], "content": _text(m["content"])} for m in history] + [
                {"role": "user", "content": message}]
            history += [{"role": "user", "content": message}, {"role": "assistant", "content": ""}]
            yield history, ""
            reply = ""
            for piece in board.chat.stream(messages, system or None, **gen):
                reply += piece
                history[-1] = {"role": "assistant", "content": reply}
                yield history, ""

        send_inputs = [chat_input, chatbot, chat_system, *infer_form.inputs]
        chat_send.click(on_send, inputs=send_inputs, outputs=[chatbot, chat_input], api_visibility="private")
        chat_input.submit(on_send, inputs=send_inputs, outputs=[chatbot, chat_input], api_visibility="private")
        chat_clear.click(lambda: [], outputs=chatbot, api_visibility="private")

        # ---------------------------------------------------------------- export
        def on_export(model, adapter, template, *export_args):
            lang_ = export_args[-1]
            vals = {"model_name_or_path": model or None, "template": template or None}
            if adapter:
                vals["adapter_name_or_path"] = adapter
            vals.update(board.values(export_form.read(export_args[:-1])))
            vals = {k: v for k, v in vals.items() if v is not None}
            from .command import command_line
            from tunekit.config.secrets import mask_secrets

            cmd = command_line(mask_secrets(vals), "export")
            check = board.validate(vals)
            if not check.ok:
                return _errors_md(check, lang_), cmd
            if not check.config.export_dir:
                return "⚠ set export_dir", cmd
            from tunekit.cli.main import VERBS

            if "export" not in VERBS:
                return "⚠ `tunekit export` is not available in this build", cmd
            if board.runner.busy:
                return f"⚠ {t('busy', lang_)}", cmd
            board.start_export(vals)
            return "", cmd

        exp_btn.click(on_export, inputs=[exp_model, exp_adapter, exp_template, *export_form.inputs, lang_radio],
                      outputs=[exp_errors, exp_cmd], api_visibility="private").then(wake, outputs=timer, api_visibility="private")

        # ---------------------------------------------------------------- language switch
        all_forms = [form, infer_form, export_form]
        for f in all_forms:
            for acc, name, specs in getattr(f, "accordions", []):
                texts.append((acc, f"sec_{name}", "label"))

        def on_lang(lang_):
            from .sections import section_title

            out = []
            for comp, key, prop in texts:
                if key == "title":
                    out.append(gr.update(value=f"## {t('title', lang_)}\n{t('subtitle', lang_)}"))
                elif key.startswith("sec_"):
                    name = key[4:]
                    specs = next((s for f in all_forms for a, n, s in f.accordions if n == name), [])
                    out.append(gr.update(label=section_title(name, specs, lang_)))
                else:
                    out.append(gr.update(**{prop: t(key, lang_)}))
            for f in all_forms:
                out += f.updates(lang=lang_, labels=True)
            return out

        lang_radio.change(on_lang, inputs=lang_radio,
                          outputs=[c for c, _, _ in texts] + [c for f in all_forms for c in f.inputs],
                          api_visibility="private")
        _ = title
    demo.tk_board = board  # type: ignore[attr-defined]
    demo.tk_forms = {"train": form, "chat": infer_form, "export": export_form}  # type: ignore[attr-defined]
    return demo


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    if isinstance(content, dict):
        return str(content.get("text", ""))
    return json.dumps(content)


def launch(host: str, port: int, share: bool = False, auth: tuple[str, str] | None = None, lang: str = "en",
           cwd: str | Path | None = None, block: bool = True, policy=None):
    """Serve the board. Gradio may serve only :attr:`Board.served_dir` (copies of the plots), and ``/login``
    is rate-limited (:mod:`tunekit.webui.ratelimit`)."""
    import importlib
    import shutil
    import threading

    from starlette.middleware import Middleware

    from tunekit.errors import EnvironmentProblem

    from .bind import port_taken_message
    from .ratelimit import LoginRateLimit

    # Warm the ML imports while the page loads: the first plan / sample preview / chat is then quick.
    threading.Thread(target=importlib.import_module, args=("transformers",), daemon=True).start()
    import atexit

    board = Board(cwd, policy=policy)
    atexit.register(board.runner.shutdown)  # a job does not outlive its board
    atexit.register(shutil.rmtree, board.served_dir, True)  # the plot copies go with it
    demo = create_app(board, lang)
    demo.queue(default_concurrency_limit=4)
    try:
        demo.launch(server_name=host, server_port=port, share=share, auth=auth, css=CSS, show_error=True,
                    ssr_mode=False, prevent_thread_lock=not block, quiet=True, footer_links=["settings"],
                    allowed_paths=[str(board.served_dir)], app_kwargs={"middleware": [Middleware(LoginRateLimit)]})
    except OSError as exc:
        if "port" in str(exc).lower():  # Gradio: "Cannot find empty port in range: 7860-7860 ..."
            raise EnvironmentProblem(port_taken_message(host, port)) from None
        raise
    return demo

