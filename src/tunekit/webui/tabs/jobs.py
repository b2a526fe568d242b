"""A tab's own job area: the state of the job that tab started, its log and (Evaluate & predict) its results,
polled by the tab's own timer. A job another tab started is not shown here, and a job started here does not drive
the Train tab's progress and chart."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from ..i18n import t
from . import Page


@dataclass
class JobArea:
    kinds: tuple[str, ...]  # the job kinds this area shows (Board.start_job's ``kind``)
    status: Any
    log: Any
    results: Any  # gr.JSON, or None
    timer: Any
    seen: Any  # gr.State: what the page shows now (a tick that finds nothing new sends nothing)

    @property
    def outputs(self) -> list[Any]:
        return [c for c in (self.status, self.log, self.results) if c is not None]


def build(page: Page, prefix: str, kinds: tuple[str, ...], results: bool = False) -> JobArea:
    lang, L = page.lang, page.label
    status = gr.Markdown(elem_id=f"tk-{prefix}-status")
    shown = None
    if results:
        shown = L(gr.JSON(label=t("eval_results", lang), elem_id=f"tk-{prefix}-results"), "eval_results")
    log = L(
        gr.Textbox(
            label=t("log", lang), lines=8, max_lines=8, interactive=False, autoscroll=True, elem_id=f"tk-{prefix}-log"
        ),
        "log",
    )
    return JobArea(kinds, status, log, shown, gr.Timer(1.0, active=False), gr.State(None))


def view(page: Page, area: JobArea, lang: str) -> dict[str, Any] | None:
    """What the area shows of the board's job, or None when the job is not one of its kinds."""
    got = page.board.job_view(lang, area.kinds)
    if got["kind"] not in area.kinds:
        return None
    shown = {"status": got["status"], "log": got["log"], "results": got["results"] or {}}
    return {"shown": shown, "running": got["state"] in ("running", "stopping")}


def wire(page: Page, area: JobArea, demo=None, stop=None) -> None:
    """Poll while this tab's job runs (a start answers with :func:`wake`), and on a page (re)load; ``stop`` (a
    button) stops the board's job when it is one of this area's kinds."""

    def on_tick(data):
        got = view(page, area, data[page.lang_radio])
        if got is None:
            return {area.timer: gr.Timer(active=False)}
        out: dict[Any, Any] = {} if got["running"] else {area.timer: gr.Timer(active=False)}
        if got["shown"] == data[area.seen]:
            return out or gr.skip()  # nothing new (an empty dict would be read as one value)
        out.update({area.seen: got["shown"], area.status: got["shown"]["status"], area.log: got["shown"]["log"]})
        if area.results is not None:
            out[area.results] = got["shown"]["results"]
        return out

    page.on(
        area.timer.tick,
        on_tick,
        inputs={area.seen, page.lang_radio},
        outputs=[*area.outputs, area.seen, area.timer],
        show_progress="hidden",
        api_visibility="private",
    )
    if demo is not None:
        page.on(demo.load, lambda: wake(page, area), outputs=[area.timer, area.seen], api_visibility="private")
    # a language switch: the next tick says the job's status and results in the new words
    page.on(
        page.lang_radio.change, lambda: wake(page, area), outputs=[area.timer, area.seen], api_visibility="private"
    )
    if stop is not None:
        page.on(stop.click, lambda: stop_job(page, area), api_visibility="private")


def stop_job(page: Page, area: JobArea) -> None:
    """Stop the board's job if it is this area's (a Stop on one tab never stops another tab's job)."""
    job = page.board.runner.poll()
    if job is not None and job.kind in area.kinds:
        page.board.runner.stop()


def wake(page: Page, area: JobArea) -> tuple[Any, None]:
    """Start this area's polling when it has a job of its kinds, running or ended (the next tick shows it)."""
    return gr.Timer(active=page.board.runner.newest(area.kinds) is not None), None


def then_wake(page: Page, area: JobArea, event) -> None:
    page.on(event.then, lambda: wake(page, area), outputs=[area.timer, area.seen], api_visibility="private")
