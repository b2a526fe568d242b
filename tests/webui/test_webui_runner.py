"""The board's job slot, the files it reads progress from, and the `tunekit webui` command line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tunekit.webui.board import Board, format_plan, progress_html
from tunekit.webui.command import verb_argv
from tunekit.webui.monitor import error_summary, format_seconds, loss_points, progress_of, read_trainer_log, tail
from tunekit.webui.runner import JobRunner

LOG_LINES = [
    {
        "step": 1,
        "total_steps": 4,
        "epoch": 0.25,
        "loss": 2.5,
        "lr": 1e-4,
        "grad_norm": 1.0,
        "num_input_tokens_seen": 64,
        "elapsed_s": 1.0,
        "eta_s": 3.0,
    },
    {
        "step": 2,
        "total_steps": 4,
        "epoch": 0.5,
        "loss": 2.25,
        "lr": 1e-4,
        "grad_norm": 0.9,
        "num_input_tokens_seen": 128,
        "elapsed_s": 2.0,
        "eta_s": 2.0,
    },
    {"step": 2, "total_steps": 4, "epoch": 0.5, "eval_loss": 2.4},
]


def test_progress_and_loss_from_trainer_log(tmp_path):
    text = "\n".join(json.dumps(r) for r in LOG_LINES) + '\n{"step": 3, "total_'  # a line being written
    (tmp_path / "trainer_log.jsonl").write_text(text)
    records = read_trainer_log(tmp_path)
    assert len(records) == 3
    p = progress_of(records)
    assert (p.step, p.total, p.epoch, p.loss, p.eval_loss, p.eta_s, p.fraction) == (2, 4, 0.5, 2.25, 2.4, 2.0, 0.5)
    assert loss_points(records) == [(1, 2.5, "loss"), (2, 2.25, "loss"), (2, 2.4, "eval_loss")]
    html = progress_html(p, "running")
    assert 'data-step="2"' in html and 'data-total="4"' in html and "width:50.0%" in html
    assert "step 2/4" in html and "ETA 0:02" in html and "loss 2.2500" in html and "eval_loss 2.4000" in html
    assert format_seconds(3725) == "1:02:05" and format_seconds(None) == "?"


def test_log_tail_keeps_the_last_progress_bar_state(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("start\ntrain 1/4\rtrain 2/4\rtrain 4/4\nerror: Option 'x' is wrong.\n")
    assert tail(log, 10) == "start\ntrain 4/4\nerror: Option 'x' is wrong."
    assert error_summary(tail(log)) == "error: Option 'x' is wrong."
    assert error_summary("a\nTraceback (most recent call last):\n  File x\nValueError: boom").endswith(
        "ValueError: boom"
    )


def test_only_tunekit_verbs_are_run():
    # -P: the working folder cannot shadow a module the job imports (test_webui_security.py)
    assert verb_argv("train", ["a=1"]) == [sys.executable, "-P", "-m", "tunekit.cli.main", "train", "a=1"]
    for bad in ("rm", "bash", "train; rm -rf /"):
        with pytest.raises(ValueError, match="only runs tunekit's own verbs"):
            verb_argv(bad, [])


def test_runner_runs_one_job_and_records_its_log(tmp_path):
    runner = JobRunner(tmp_path)
    job = runner.start("train", ["--help"], "out")
    assert job.log_path.parent == tmp_path / ".tunekit_cache" / "webui_jobs" and job.log_path.name.endswith(
        "-train.log"
    )
    assert not (tmp_path / "out").exists()  # output_dir is left to the trainer (it refuses a non-empty one)
    assert runner.wait(60) == 0
    assert job.state == "finished"
    log = job.log_path.read_text()
    assert log.startswith("$ tunekit train --help\n") and "usage: tunekit train" in log


def _catches_sigint(pid: int) -> bool:
    """Whether process ``pid`` has a SIGINT handler installed (its SigCgt mask in /proc)."""
    try:
        fields = dict(
            line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line
        )
    except OSError:
        return False
    return bool(int(fields.get("SigCgt", "0"), 16) & (1 << (signal.SIGINT - 1)))


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads /proc")
def test_stop_interrupts_the_job_and_a_second_job_waits(tmp_path):
    """Even when the board itself runs with SIGINT ignored, as a shell's background job (``tunekit webui &`` from a
    script) does: its jobs put Python's Ctrl+C handler back (env.restore_sigint_if_asked), so Stop still stops them.
    Without that, the job ignored the SIGINT and finished with 0 (seen in a background ``make test``)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        runner = JobRunner(tmp_path)
        job = runner.start("env", [], "out")  # imports torch: > 1 s, so it is still running when stopped
    finally:
        signal.signal(signal.SIGINT, previous)
    with pytest.raises(RuntimeError, match="already running"):
        runner.start("env", [], "out2")
    deadline = time.monotonic() + 30
    while not _catches_sigint(job.proc.pid) and job.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)  # until its handler is in place (a SIGINT before that would be lost, as for any program)
    runner.stop()
    code = runner.wait(60)
    assert job.stop_requests == 1 and code is not None and code != 0, (code, job.log_path.read_text()[-500:])
    assert job.state == "stopped"


def test_failed_job_shows_its_error(tmp_path):
    board = Board(cwd=tmp_path)
    job = board.runner.start("train", ["no_such_option=1", "output_dir=out"], "out")
    board.runner.wait(60)
    view = board.job_view()
    assert job.returncode == 2 and view["state"] == "failed"
    assert "Unknown option 'no_such_option'" in view["status"] and "exit 2" in view["status"]


def test_format_plan_reads_the_planner_json():
    plan = {
        "total_steps": 30,
        "steps_per_epoch": 10,
        "fits": False,
        "memory": {"total_gib": 27.5, "components": {"weights": 15.0, "activations": 12.5}},
        "gpu": {"name": "A10", "memory_gib": 24},
        "overrides": {"per_device_train_batch_size": 2},
    }
    md = format_plan(plan)
    assert "✗ does not fit — 27.50 GiB / 24 GiB" in md
    assert "| weights | 15.00 |" in md and "total_steps: 30 · steps_per_epoch: 10" in md
    assert "`per_device_train_batch_size=2`" in md
    assert "显存不足" in format_plan(plan, "zh")


def test_webui_help_is_fast_and_binds_to_loopback_by_default():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from tunekit.cli.main import main\n"
            "try:\n    main(['webui', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('gradio' in sys.modules, 'torch' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "--auth USER:PASSWORD" in out.stdout and "127.0.0.1" in out.stdout
    assert out.stdout.strip().endswith("False False")
    from tunekit.cli.webui_cmd import parse_auth, resolve_bind

    assert resolve_bind(None, None, env={}) == ("127.0.0.1", 7860)
    assert resolve_bind(None, None, env={"GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": "9000"}) == (
        "0.0.0.0",
        9000,
    )
    assert resolve_bind("localhost", 8000, env={"GRADIO_SERVER_PORT": "9000"}) == ("localhost", 8000)
    assert parse_auth("admin:pa:ss") == ("admin", "pa:ss") and parse_auth(None) is None
    from tunekit.errors import ConfigError

    with pytest.raises(ConfigError, match="USER:PASSWORD"):
        parse_auth("admin")


def test_app_has_a_widget_for_every_option():
    pytest.importorskip("gradio")
    from tunekit.config import Config
    from tunekit.webui.app import create_app

    demo = create_app()
    forms = demo.tk_forms
    names = [n for f in forms.values() for n in f.comps]
    assert sorted(names) == sorted(Config.model_fields)
    assert forms["train"]["learning_rate"].info.startswith("`learning_rate` · Peak learning rate.")
