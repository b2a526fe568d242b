"""The Gradio board: Train (form, data preview, plan, command, start/stop, progress), Evaluate &
predict, Chat and Export tabs, in English or Chinese.

Widgets only: what they do lives in :class:`tunekit.webui.board.Board`; each tab is a module of
:mod:`tunekit.webui.tabs`. Every event is registered with :meth:`~tunekit.webui.tabs.Page.on`, which wraps its
handler so that a failure answers in the board's words (:mod:`tunekit.webui.guard`).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import gradio as gr
from starlette.middleware import Middleware

from tunekit.errors import EnvironmentProblem

from . import backend as adapters
from .bind import check_trusted_proxies, port_taken_message
from .board import Board
from .chat import MAX_UPLOAD_BYTES
from .i18n import LANG_LABELS, t
from .ratelimit import LoginRateLimit
from .sections import section_title
from .tabs import Page, train_live
from .tabs import chat as chat_tab
from .tabs import eval as eval_tab
from .tabs import export as export_tab
from .tabs import train as train_tab

CSS = """
.tk-invalid { border: 2px solid #d33 !important; border-radius: 6px; }
.tk-invalid [data-testid="block-info"], .tk-invalid .info { color: #d33 !important; }
.tk-progress { position: relative; height: 28px; background: #eee; border-radius: 6px; overflow: hidden; }
.tk-progress .tk-bar { position: absolute; inset: 0 auto 0 0; background: #4caf50; transition: width .5s; }
.tk-progress span { position: relative; padding-left: 10px; line-height: 28px; font-family: monospace; }
#tk-errors { color: #d33; }
"""


def create_app(board: Board | None = None, lang: str = "en") -> gr.Blocks:
    """Build the board (not launched). One :class:`Board` (job slot, chat model) per app; each tab is a
    module of :mod:`tunekit.webui.tabs`."""
    page = Page(board=board or Board(), lang=lang, templates=adapters.template_names())
    with gr.Blocks(title="tunekit board", analytics_enabled=False) as demo:
        with gr.Row():
            title = page.label(gr.Markdown(_title(lang), elem_id="tk-title"), "title", "value")
            page.lang_radio = gr.Radio(
                choices=[(v, k) for k, v in LANG_LABELS.items()],
                value=lang,
                label="Language / 语言",
                elem_id="tk-lang",
                scale=0,
                min_width=200,
            )
        with gr.Tabs(elem_id="tk-tabs"):
            train = train_tab.build(page)
            evaluate = eval_tab.build(page)
            chat = chat_tab.build(page)
            export = export_tab.build(page)
        page.timer = gr.Timer(1.0, active=False)  # polls only while a job runs (see Page.wake / on_tick)
        train_tab.wire(page, train)
        eval_tab.wire(page, evaluate, train, demo)  # each with its own model, progress and result (tabs/source.py)
        chat_tab.wire(page, chat, train)
        export_tab.wire(page, export, train, demo)
        _wire_progress(page, demo, train)
        _wire_language(page, [train.form, chat.form, export.form, *evaluate.forms])
        _ = title
    demo.tk_board = page.board  # type: ignore[attr-defined]
    demo.tk_forms = {"train": train.form, "chat": chat.form, "export": export.form}  # type: ignore[attr-defined]
    # the tabs' widgets, for tests
    demo.tk_tabs = {"train": train, "eval": evaluate, "chat": chat, "export": export}  # type: ignore[attr-defined]
    return demo


def _title(lang: str) -> str:
    return f"## {t('title', lang)}\n{t('subtitle', lang)}"


def _wire_progress(page: Page, demo: gr.Blocks, train: train_tab.TrainTab) -> None:
    """The training run's progress polled from its files (so it survives a refresh), and the page-load restore. An
    evaluation or export job is shown by its own tab (tabs/jobs.py), never here."""
    board, form = page.board, train.form
    view_sig = gr.State(None)

    def on_tick(data):
        """Send only what changed since this page's last tick (re-rendering a plot every second is costly)."""
        view = board.job_view(data[page.lang_radio], train_live.TRAIN)
        sig, new = data[view_sig], view["signature"]
        if new == sig:
            running = view["state"] in ("running", "stopping")  # nothing new: an answer that changes nothing
            return {view_sig: sig} if running else {page.timer: gr.Timer(active=False)}

        def changed(i: int) -> bool:  # signature parts: (job, state, records, log size, png)
            return sig is None or new[:2] != sig[:2] or len(new) < 5 or len(sig) < 5 or new[i] != sig[i]

        out: dict[Any, Any] = {view_sig: new}  # one more tick after the end finds nothing new and stops the timer
        kind = view["kind"]
        if kind == "train":
            out[train.status] = view["status"]
            if changed(2):
                out[train.progress] = view["html"]
                out.update(train_live.chart_updates(train, view))
            if changed(4):
                out[train.loss_png] = view["png"]
            if changed(3):
                out[train.log] = view["log"]
        return out

    page.on(
        page.timer.tick,
        on_tick,
        inputs={view_sig, page.lang_radio},
        outputs=[
            train.progress,
            train.status,
            train.loss_plot,
            train.lr_plot,
            train.loss_png,
            train.log,
            view_sig,
            page.timer,
        ],
        show_progress="hidden",
        api_visibility="private",
    )

    def on_page_load(lang):
        """A refreshed page shows the form of the job that is running (or ran) on this board."""
        job = board.runner.poll()
        out: dict[Any, Any] = {view_sig: None}
        if job is None or job.kind != "train" or not job.form:
            return out
        restored = {k: v for k, v in job.form.items() if k in form.comps}
        _check, cmd, yml = board.preview(restored)
        return {**out, **form.update_map(values=restored), train.command: cmd, train.yaml: yml}

    loaded = page.on(
        demo.load,
        on_page_load,
        inputs=[page.lang_radio],
        outputs=[*form.inputs, view_sig, train.command, train.yaml],
        api_visibility="private",
    )
    page.then_wake(loaded)
    # a language switch: the next tick says the job's status, progress and log in the new words
    page.on(
        page.lang_radio.change, lambda: (page.wake(), None), outputs=[page.timer, view_sig], api_visibility="private"
    )
    # <body data-tk-loaded>: the restored form is on the page, so what is typed from now on is not overwritten
    page.on(loaded.then, None, js="() => { document.body.dataset.tkLoaded = '1'; }", api_visibility="private")


def _wire_language(page: Page, forms: list) -> None:
    """The language switch re-labels every registered text, section title and option help."""
    for f in forms:
        for acc, name, _specs in f.accordions:
            page.texts.append((acc, f"sec_{name}", "label"))

    def on_lang(lang):
        out = []
        for _comp, key, prop in page.texts:
            if key == "title":
                out.append(gr.update(value=_title(lang)))
            elif key.startswith("sec_"):
                name = key[4:]
                specs = next((s for f in forms for _a, n, s in f.accordions if n == name), [])
                out.append(gr.update(label=section_title(name, specs, lang)))
            else:
                out.append(gr.update(**{prop: t(key, lang)}))
        for f in forms:
            out += f.updates(lang=lang, labels=True)
        return out

    page.on(
        page.lang_radio.change,
        on_lang,
        inputs=page.lang_radio,
        outputs=[c for c, _, _ in page.texts] + [c for f in forms for c in f.inputs],
        api_visibility="private",
    )


def launch(
    host: str,
    port: int,
    share: bool = False,
    auth: tuple[str, str] | None = None,
    lang: str = "en",
    cwd: str | Path | None = None,
    block: bool = True,
    policy=None,
    max_upload_bytes: int | None = None,
    trusted_proxies: list[str] | tuple[str, ...] = (),
):
    """Serve the board. Gradio may serve only :attr:`Board.served_dir` (copies of the plots, chat images and
    sample thumbnails), uploads are refused over ``max_upload_bytes`` (default
    :data:`tunekit.webui.chat.MAX_UPLOAD_BYTES`), and ``/login`` is rate-limited (:mod:`tunekit.webui.ratelimit`)
    by the connection's address: ``X-Forwarded-For`` is believed only from ``trusted_proxies``."""
    # Warm the ML imports while the page loads: the first plan / sample preview / chat is then quick.
    threading.Thread(target=importlib.import_module, args=("transformers",), daemon=True).start()
    board = Board(cwd, policy=policy, max_upload_bytes=max_upload_bytes or MAX_UPLOAD_BYTES)
    atexit.register(board.runner.shutdown)  # a job does not outlive its board
    atexit.register(shutil.rmtree, board.served_dir, True)  # the plot copies go with it
    demo = create_app(board, lang)
    demo.queue(default_concurrency_limit=4)
    proxies = check_trusted_proxies(trusted_proxies)
    try:
        with _forwarded_allow_ips(proxies):
            demo.launch(
                server_name=host,
                server_port=port,
                share=share,
                auth=auth,
                css=CSS,
                show_error=True,
                ssr_mode=False,
                prevent_thread_lock=not block,
                quiet=True,
                footer_links=["settings"],
                max_file_size=board.chat.max_upload_bytes,
                allowed_paths=[str(board.served_dir)],
                app_kwargs={"middleware": [Middleware(LoginRateLimit)]},
            )
    except OSError as exc:
        if "port" in str(exc).lower():  # Gradio: "Cannot find empty port in range: 7860-7860 ..."
            raise EnvironmentProblem(port_taken_message(host, port)) from None
        raise
    return demo


@contextlib.contextmanager
def _forwarded_allow_ips(proxies: list[str]):
    """While Gradio builds its server: uvicorn rewrites a request's client from ``X-Forwarded-For`` only for a
    connection from these addresses (its ``FORWARDED_ALLOW_IPS``, which defaults to loopback: any local
    process could then pick the address the login limit counts). Empty: no header is believed."""
    old = os.environ.get("FORWARDED_ALLOW_IPS")
    os.environ["FORWARDED_ALLOW_IPS"] = ",".join(proxies)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("FORWARDED_ALLOW_IPS", None)
        else:
            os.environ["FORWARDED_ALLOW_IPS"] = old
