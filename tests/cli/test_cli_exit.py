"""``tunekit``'s fast exit (cli/main.py ``exit_now``): what a normal exit does, minus the interpreter's teardown."""

from __future__ import annotations

import os
import subprocess
import sys


def _run(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


def test_with_torch_loaded_it_waits_for_threads_runs_atexit_and_keeps_the_code(tmp_path):
    a, t = tmp_path / "atexit.txt", tmp_path / "thread.txt"
    proc = _run(
        "import atexit, threading, time, torch\n"
        "from tunekit.cli.main import exit_now\n"
        f"atexit.register(lambda: open({str(a)!r}, 'w').write('ran'))\n"
        f"threading.Thread(target=lambda: (time.sleep(0.3), open({str(t)!r}, 'w').write('done'))).start()\n"
        "print('buffered output', end='')\n"
        "exit_now(3)\n"
        "print('not reached')\n"
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "buffered output"
    assert a.read_text() == "ran" and t.read_text() == "done"


def test_without_torch_or_when_asked_it_returns_for_a_normal_exit():
    assert _run("import sys; from tunekit.cli.main import exit_now; sys.exit(exit_now(4) + 1)").returncode == 5
    slow = _run(
        "import sys, torch; from tunekit.cli.main import exit_now; sys.exit(exit_now(4) + 1)", TUNEKIT_SLOW_EXIT="1"
    )
    assert slow.returncode == 5


def test_the_program_exits_with_the_verbs_code(tiny_qwen, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tunekit.cli.main", "tiny-model", str(tmp_path / "m"), "--like", "qwen2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "m" / "config.json").is_file()
    bad = subprocess.run(
        [sys.executable, "-m", "tunekit.cli.main", "train", "model_name_or_path=/nonexistent"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")


def test_the_collector_is_paused_and_frozen_only_in_the_program_that_paused_it():
    proc = _run(
        "import gc\n"
        "from tunekit.host import gc_pause as startup_gc\n"
        "startup_gc.settle()\n"
        "print(gc.isenabled(), gc.get_freeze_count() == 0)\n"  # a function caller (tests, scripts): untouched
        "startup_gc.pause()\n"
        "print(gc.isenabled())\n"
        "import json, email.parser\n"
        "startup_gc.settle()\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 0)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "False", "True", "True"]
    off = _run(
        "import gc\nfrom tunekit.host import gc_pause as startup_gc\nstartup_gc.pause()\nprint(gc.isenabled())",
        TUNEKIT_GC_PAUSE="0",
    )
    assert off.stdout.split() == ["True"]
