"""Live feedback on the Train tab and a newcomer's first-run defaults.

Handlers are called as Gradio calls them (the handler registered on the built board, its inputs as a
``{component: value}`` dict), and their answers go through Gradio's own ``postprocess_data``: what the browser
gets. The chart as the browser draws it, through a whole run with no error toast: tests/webui/test_webui_browser.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tunekit.errors import ConfigError
from tunekit.webui import backend as adapters
from tunekit.webui import defaults
from tunekit.webui.board import Board
from tunekit.webui.runner import Job

gr = pytest.importorskip("gradio")

HANDLER_FAILED = "⚠ This action could not be completed; the terminal running `tunekit webui` has the details."


# ------------------------------------------------------------------ the built board and its handlers
@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from tunekit.webui.app import create_app

    board = Board(cwd=tmp_path_factory.mktemp("live"))
    demo = create_app(board)
    yield demo, board, demo.tk_tabs["train"]
    job = board.runner.job
    if job is not None and job.proc is not None and job.proc.poll() is None:
        job.proc.kill()
        job.proc.wait()


def _lang_radio(demo):
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "tk-lang")


def _tick(demo, train):
    (fn,) = [f for f in demo.fns.values() if f.name == "on_tick" and train.loss_plot in f.outputs]
    return fn


def _click(demo, button):
    (fn,) = [f for f in demo.fns.values() if (button._id, "click") in f.targets]
    return fn


def _call(demo, block_fn, values: dict, lang: str = "en"):
    """The handler's answer for ``values`` (the rest of its inputs at their initial values), and that answer as
    Gradio sends it to the browser (one entry per output)."""
    data = {c: getattr(c, "value", None) for c in block_fn.inputs}
    data.update(values)
    data[_lang_radio(demo)] = lang
    answer = block_fn.fn(data) if block_fn.inputs_as_dict else block_fn.fn(*[data[c] for c in block_fn.inputs])
    return answer, asyncio.run(demo.postprocess_data(block_fn, answer, None))


def _job(board: Board, out: Path, *, running: bool = False, **kw) -> Job:
    old = board.runner.job
    if old is not None and old.proc is not None and old.proc.poll() is None:
        old.proc.kill()
        old.proc.wait()
    out.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{out.name}.log"
    log.write_text("$ tunekit train\n")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) if running else None
    job = Job("train", [], out, log, kind="train", proc=proc, returncode=None if running else 0, **kw)
    board.runner.job = board.runner.last[job.kind] = job
    return job


def _write_log(out: Path, rows: list[dict]) -> None:
    (out / "trainer_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


LOGGED = [  # a 12-step run logging every step, evaluating at steps 4 and 8; one non-finite loss (null)
    *(
        {"step": s, "total_steps": 12, "epoch": s / 12, "loss": 3.0 - 0.2 * s + 0.15 * (s % 3), "lr": 1e-3 * s / 12}
        for s in range(1, 12)
    ),
    {"step": 12, "total_steps": 12, "epoch": 1.0, "loss": None, "lr": 1e-3},
]
LOGGED.insert(4, {"step": 4, "total_steps": 12, "epoch": 0.33, "eval_loss": 2.5})
LOGGED.insert(9, {"step": 8, "total_steps": 12, "epoch": 0.66, "eval_loss": 2.1})


# ------------------------------------------------------------------ 1. the live chart
def test_the_loss_chart_gets_numbers_in_step_order(app, tmp_path):
    """The loss chart's data as Gradio sends it: numeric (quantitative) step and value columns, rows in step order,
    exactly the logged values (a null loss left out); colours for the series present; the x axis the whole run."""
    demo, board, train = app
    out = tmp_path / "run"
    _job(board, out)
    _write_log(out, LOGGED)
    tick = _tick(demo, train)
    answer, sent = _call(demo, tick, {})
    loss = sent[tick.outputs.index(train.loss_plot)]
    value = loss["value"]
    assert value["datatypes"] == {"step": "quantitative", "value": "quantitative", "series": "nominal"}
    assert value["mark"] == "line" and value["columns"] == ["step", "value", "series"]
    want = sorted(
        [(r["step"], r["loss"], "loss") for r in LOGGED if r.get("loss") is not None]
        + [(r["step"], r["eval_loss"], "eval_loss") for r in LOGGED if "eval_loss" in r],
        key=lambda p: (p[0], p[2] != "loss"),
    )
    assert [tuple(row) for row in value["data"]] == [(s, pytest.approx(v), k) for s, v, k in want]
    assert loss["color_map"] == {"loss": "#1f77b4", "eval_loss": "#ff7f0e"} and loss["x_lim"] == [0, 12]
    lr = sent[tick.outputs.index(train.lr_plot)]["value"]
    assert lr["datatypes"] == {"step": "quantitative", "learning_rate": "quantitative"}
    assert [tuple(row) for row in lr["data"]] == [(r["step"], pytest.approx(r["lr"])) for r in LOGGED if "lr" in r]


def test_no_chart_before_the_first_logged_value(app, tmp_path):
    """The chart fixes its axis types from the first data it gets: before anything is logged it gets no data (an
    empty frame of text columns made both axes categorical for the whole run)."""
    demo, board, train = app
    _job(board, tmp_path / "run", running=True)
    tick = _tick(demo, train)
    _answer, sent = _call(demo, tick, {})
    for plot in (train.loss_plot, train.lr_plot):
        assert sent[tick.outputs.index(plot)]["value"] is None


def test_a_tick_with_nothing_new_answers_what_gradio_accepts(app, tmp_path):
    """While the run goes, a tick that finds nothing new changes nothing, in an answer Gradio accepts (an empty
    ``{}`` made Gradio toast "didn't return enough output values (needed: 10, returned: 1)")."""
    demo, board, train = app
    out = tmp_path / "run"
    _job(board, out, running=True)
    _write_log(out, LOGGED[:3])
    tick = _tick(demo, train)
    (view_sig,) = [c for c in tick.inputs if type(c).__name__ == "State"]
    first, _ = _call(demo, tick, {view_sig: None})
    again, sent = _call(demo, tick, {view_sig: first[view_sig]})
    assert again == {view_sig: first[view_sig]} and len(sent) == len(tick.outputs)


# ------------------------------------------------------------------ 1. the progress reaches the last step
def test_the_progress_of_a_finished_run_reaches_its_last_step(app, tmp_path):
    """A 12-step run logging every 5 steps has "step 10" last in its log; the bar of the finished run shows 12/12
    from train_results.json, with the run's time and an ETA of 0."""
    demo, board, train = app
    out = tmp_path / "run"
    rows = [
        {"step": s, "total_steps": 12, "epoch": s / 12, "loss": 2.0, "elapsed_s": s, "eta_s": 12 - s} for s in (5, 10)
    ]
    results = {"total_steps": 12, "train_runtime": 13.5, "epoch": 1.0, "train_loss": 2.0}
    job = _job(board, out)
    _write_log(out, rows)
    (out / "train_results.json").write_text(json.dumps(results))
    html = board.job_view()["html"]
    assert 'data-state="finished" data-step="12" data-total="12"' in html and "width:100.0%" in html
    assert "step 12/12 · epoch 1.00 · elapsed 0:14 · ETA 0:00 · loss 2.0000" in html
    tick = _tick(demo, train)
    _answer, sent = _call(demo, tick, {}, lang="zh")
    assert "步数 12/12" in sent[tick.outputs.index(train.progress)]  # an HTML or Markdown value is sent as text
    assert sent[tick.outputs.index(train.status)].startswith("**已完成**")
    # a results file older than the job is an earlier run's: not this one's last step
    os.utime(out / "train_results.json", (job.started - 60, job.started - 60))
    assert 'data-step="10" data-total="12"' in board.job_view()["html"]
    # a stopped run ends at the step it reached, of its total
    job.stop_requests, job.returncode = 1, 130
    (out / "train_results.json").write_text(json.dumps({**results, "total_steps": 11}))
    assert 'data-state="stopped" data-step="11" data-total="12"' in board.job_view()["html"]


# ------------------------------------------------------------------ 2. no raw framework error
def test_a_failing_handler_shows_the_boards_message(app, tmp_path, monkeypatch):
    """A handler that raises answers with one line in the board's words in its tab's message area, in the page's
    language; the raw exception text is not shown. A TunekitError (a message for the user) keeps its text."""
    demo, board, train = app
    _job(board, tmp_path / "run", running=True)
    secret = "KeyError: '/home/someone/.cache/private' at monitor.py:42"

    def boom(*_a, **_k):
        raise RuntimeError(secret)

    monkeypatch.setattr(board, "job_view", boom)
    tick = _tick(demo, train)
    answer, sent = _call(demo, tick, {})
    assert answer == {train.status: HANDLER_FAILED} and len(sent) == len(tick.outputs)
    answer, _ = _call(demo, tick, {}, lang="zh")
    assert answer == {train.status: "⚠ 此操作未能完成；详情见运行 `tunekit webui` 的终端。"}

    monkeypatch.setattr(board, "preview", boom)
    preview = _click(demo, train.preview_btn)
    answer, _ = _call(demo, preview, {})
    assert answer == {train.errors: HANDLER_FAILED}

    def refused(*_a, **_k):
        raise ConfigError("Option 'output_dir' is outside the workspace: choose a folder inside it.")

    monkeypatch.setattr(board, "preview", refused)
    answer, _ = _call(demo, preview, {})
    assert answer == {
        train.errors: "⚠ This action could not be completed: Option 'output_dir' is outside the workspace: choose "
        "a folder inside it."
    }


# ------------------------------------------------------------------ 3. first-run defaults
def test_a_new_page_starts_with_the_first_run_defaults(app):
    """Logging every 5 steps, the loss plot on, a run name and an output folder filled in, "this machine" for the
    plan; the schema's defaults stay as they are, so these values are in the command the board shows and runs."""
    demo, board, train = app
    form = train.form
    assert form["logging_steps"].value == "5" and form["plot_loss"].value is True
    assert re.fullmatch(r"saves/sft-lora-\d{8}-\d{6}", form["output_dir"].value)
    assert re.fullmatch(r"sft-lora-\d{8}-\d{6}", form["run_name"].value)
    assert board.defaults()["logging_steps"] == "10.0" and board.defaults()["plot_loss"] is False
    page = {name: comp.value for name, comp in form.comps.items()}
    _check, command, _yaml = board.preview(page)
    assert "logging_steps=5" in command and "plot_loss=true" in command and "run_name=sft-lora-" in command
    here = adapters.detected_gpu()
    assert train.gpu.value == here and train.gpu.choices[0] == tuple(board.plan_devices()[0][0])
    assert train.gpu.choices[0][0].startswith("this machine")


def test_the_plan_device_is_this_machine(monkeypatch):
    board = Board()
    monkeypatch.setattr(adapters, "detected_gpu", lambda: adapters.NO_GPU)
    choices, value = board.plan_devices("zh")
    assert value == "" and choices[0] == ("本机（未识别到 GPU：只估算显存）", "")
    assert [v for _label, v in choices].count("") == 1  # no second "none / CPU" entry
    gpu = adapters.gpu_choices()[0]
    monkeypatch.setattr(adapters, "detected_gpu", lambda: gpu)
    choices, value = board.plan_devices()
    assert value == gpu and choices[:2] == [(f"this machine ({gpu})", gpu), ("none / CPU (memory only)", "")]
    assert [v for _label, v in choices].count(gpu) == 1


def test_the_output_folder_follows_the_model_stage_and_method(app):
    """The names the board made follow the model, stage and method; names the user typed are theirs."""
    demo, _board, train = app
    form = train.form
    handlers = [f for f in demo.fns.values() if f.name == "on_source"]
    sources = ("model_name_or_path", "stage", "finetuning_type")
    assert {f.targets[0] for f in handlers} == {(form[n]._id, "change") for n in sources}
    assert handlers[0].outputs == [form["output_dir"], form["run_name"]] and len({f.fn for f in handlers}) == 1
    follow = handlers[0].fn
    start = ["", "sft", "lora", "saves/sft-lora-20261205-061230", "sft-lora-20261205-061230"]
    new_dir, new_name = follow("/models/Qwen2.5-0.5B/", "dpo", "lora", *start[3:])
    assert re.fullmatch(r"saves/Qwen2\.5-0\.5B/dpo-lora-\d{8}-\d{6}", new_dir)
    assert re.fullmatch(r"dpo-lora-\d{8}-\d{6}", new_name)
    assert follow("org/m", "sft", "lora", "saves/mine", "my run") == [gr.skip(), gr.skip()]
    # a board name that still matches keeps its time (a restored page shows its run's folder)
    assert follow("", "sft", "lora", *start[3:]) == [gr.skip(), gr.skip()]


def _form(board: Board, **values) -> dict:
    form = {**board.defaults(), **board.first_run_form(board.defaults())}
    return {**form, **{k: str(v) if not isinstance(v, bool) else v for k, v in values.items()}}


def test_a_short_run_logs_every_step_and_says_so(tmp_path):
    """Decided when the step count is known (here max_steps; else the plan's count), said in the YAML preview."""
    board = Board(cwd=tmp_path)
    form, changed, notes = board.fill_run(_form(board, max_steps=12), "en")
    assert form["logging_steps"] == "1" and changed["logging_steps"] == "1"
    assert notes == ["logging_steps is 1: the run has 12 steps (fewer than 50), so every step is logged and plotted."]
    _check, command, yml = board.preview(form, notes=notes)
    assert "logging_steps=1" in command and "max_steps=12" in command
    assert yml.startswith(f"# {notes[0]}\n") and "\nlogging_steps: 1" in yml
    again, changed, notes_again = board.fill_run(form, "en")  # the next Preview says why again
    assert again["logging_steps"] == "1" and "logging_steps" not in changed and notes_again == notes
    form, changed, notes = board.fill_run(_form(board, max_steps=60), "en")
    assert form["logging_steps"] == "5" and "logging_steps" not in changed and notes == []
    form, _changed, notes = board.fill_run(_form(board, max_steps=12, logging_steps=10), "zh")
    assert form["logging_steps"] == "10" and notes == []  # a value the user chose stays
    _form_zh, _changed, notes = board.fill_run(_form(board, max_steps=12), "zh")
    assert notes == ["logging_steps 设为 1：本次训练共 12 步（少于 50 步），因此每一步都记录并绘入损失曲线。"]


def test_a_board_named_folder_that_holds_a_run_gets_a_fresh_name(tmp_path):
    board = Board(cwd=tmp_path)
    first = _form(board, max_steps=60)
    (tmp_path / first["output_dir"]).mkdir(parents=True)
    (tmp_path / first["output_dir"] / "trainer_log.jsonl").write_text("{}\n")
    form, changed, notes = board.fill_run(first, "en")
    assert form["output_dir"] != first["output_dir"] and defaults.is_auto("output_dir", form["output_dir"])
    assert changed["output_dir"] == form["output_dir"] and form["run_name"] == form["output_dir"].split("/")[-1]
    assert notes == [f"{first['output_dir']} already holds a run: this one goes to {form['output_dir']}."]
    for keep in ({"overwrite_output_dir": True}, {"resume_from_checkpoint": "true"}):
        form, _, _ = board.fill_run({**first, **keep}, "en")
        assert form["output_dir"] == first["output_dir"]
