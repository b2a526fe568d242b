"""One message for one situation: a tab's launch while a job runs says the runner's keyed refusal
(``board_job_running``, :class:`~tunekit.webui.runner.JobBusy`'s text) in the page's language, and starts nothing."""

from __future__ import annotations

import pytest

from tests.helpers import demo_workspace
from tunekit.webui.board import Board

gr = pytest.importorskip("gradio")

BUSY = {
    "en": "⚠ a job is already running on this board: stop it or wait for it to finish",
    "zh": "⚠ 面板上已有任务在运行：请先停止它，或等它结束",
}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from tunekit.webui.app import create_app

    root = demo_workspace(tmp_path_factory.mktemp("ws"))
    (root / "exports" / "tiny").mkdir(parents=True)
    board = Board(cwd=root)
    return board, create_app(board)


@pytest.fixture
def busy(app, monkeypatch):
    """A job runs on the board; the jobs a handler would start anyway are kept here."""
    board = app[0]
    calls: list = []
    monkeypatch.setattr(board.runner, "start", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(board, "start_export", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(board, "start_job", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(type(board.runner), "busy", property(lambda self: True))
    return calls


def _handler(demo, comp, output=None):
    fns = [f for f in demo.fns.values() if (comp._id, "click") in f.targets]
    (fn,) = [f for f in fns if output is None or output in f.outputs]
    return fn


def _lang_radio(demo):
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "tk-lang")


def _data(demo, fn, values: dict, lang: str) -> dict:
    data = {c: getattr(c, "value", None) for c in fn.inputs}
    return {**data, **values, _lang_radio(demo): lang}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_train_eval_and_export_say_the_runners_refusal(app, busy, lang):
    _board, demo = app
    train, ev, ex = demo.tk_tabs["train"], demo.tk_tabs["eval"], demo.tk_tabs["export"]
    start = _handler(demo, train.start_btn, train.errors)
    assert start.fn(_data(demo, start, {}, lang))[train.errors] == BUSY[lang]
    run = _handler(demo, ev.run_btn)
    values = {
        ev.source.model: "models/tiny",
        ev.source.template: "qwen",
        ev.data["eval_dataset"]: ["demo"],
        ev.run["output_dir"]: "saves/run/eval",
    }
    assert run.fn(_data(demo, run, values, lang))[ev.errors] == BUSY[lang]
    export = _handler(demo, ex.export_btn)
    values = {ex.source.model: "models/tiny", ex.source.template: "qwen", ex.form["export_dir"]: "exports/tiny"}
    assert export.fn(_data(demo, export, values, lang))[ex.errors] == BUSY[lang]
    verify = _handler(demo, ex.verify_btn)
    assert verify.fn(_data(demo, verify, values, lang))[ex.errors] == BUSY[lang]
    assert busy == []
