"""``tunekit warm`` (cli/warm.py): commands forked from a process that already imported torch & co. behave
exactly like cold ones — same files, losses, output, exit codes, graceful stop — and fall back to a cold
start whenever the warm process does not match the caller."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import alpaca_records, base_config, write_dataset

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="tunekit warm is Linux-only")


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "tunekit.cli.main", *args]


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A warm process in a private cache folder; yields the environment that reaches it."""
    cache = tmp_path_factory.mktemp("warmcache")
    env = {**os.environ, "TUNEKIT_CACHE": str(cache)}
    env.pop("TUNEKIT_WARM", None)
    started = subprocess.run(_cmd("warm", "start", "--idle-minutes", "10"), env=env, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stdout + started.stderr
    assert "ready (pid" in started.stdout
    yield env
    stopped = subprocess.run(_cmd("warm", "stop"), env=env, capture_output=True, text=True, timeout=60)
    assert "stopped 1 process(es)" in stopped.stdout
    from tunekit.cli import warm as warm_module

    assert not warm_module.socket_path(env).exists()


def _children(env) -> list[str]:
    log = Path(env["TUNEKIT_CACHE"]) / "warm" / "warm.log"
    return [line for line in log.read_text().splitlines() if " child " in line]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("warmdata")
    write_dataset(folder, "toy", alpaca_records(16, seed=1))
    return folder


def _train_args(model, data_dir, out, **overrides) -> list[str]:
    return [f"{k}={v}" for k, v in base_config(model, data_dir, out, **overrides).items()]


def _losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "trainer_log.jsonl").read_text().splitlines() if '"loss"' in line]


def test_a_warm_train_equals_a_cold_one(warm, tiny_qwen, data_dir, tmp_path):
    before = len(_children(warm))
    hot = subprocess.run(_cmd("train", *_train_args(tiny_qwen, data_dir, tmp_path / "hot")), env=warm,
                         capture_output=True, text=True, timeout=300)
    assert hot.returncode == 0, hot.stderr
    assert len(_children(warm)) == before + 1 and "tunekit train" in _children(warm)[-1]
    cold = subprocess.run(_cmd("train", *_train_args(tiny_qwen, data_dir, tmp_path / "cold")), env={**warm, "TUNEKIT_WARM": "0"},
                          capture_output=True, text=True, timeout=300)
    assert cold.returncode == 0, cold.stderr
    assert len(_children(warm)) == before + 1  # TUNEKIT_WARM=0: cold
    assert _losses(tmp_path / "hot") == _losses(tmp_path / "cold") and len(_losses(tmp_path / "hot")) == 4
    assert "done: " in hot.stdout and "trainable params" in hot.stdout  # the child wrote to the caller's stdout
    assert (tmp_path / "hot" / "adapter_model.safetensors").is_file()


def test_errors_and_exit_codes_are_the_cold_programs(warm, tmp_path):
    before = len(_children(warm))
    bad = subprocess.run(_cmd("train", "model_name_or_path=/nonexistent/model", "template=qwen", "dataset=x",
                              f"output_dir={tmp_path / 'o'}"), env=warm, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("error: Model folder /nonexistent/model does not exist")
    assert "Traceback" not in bad.stderr
    assert len(_children(warm)) == before + 1
    # a relative path is read in the caller's folder, not the warm process's
    (tmp_path / "cfg.yaml").write_text("model_name_or_path: /nonexistent/again\n")
    rel = subprocess.run(_cmd("train", "cfg.yaml"), env=warm, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert rel.returncode == 2 and "/nonexistent/again" in rel.stderr


def test_another_import_time_environment_starts_cold(warm, tmp_path):
    before = len(_children(warm))
    other = subprocess.run(_cmd("train", "model_name_or_path=/nonexistent/model"), env={**warm, "SOME_UNRELATED_VAR": "1"},
                           capture_output=True, text=True, timeout=120)
    assert other.returncode == 2 and len(_children(warm)) == before + 1  # not read at import: still warm
    before += 1
    proc = subprocess.run(_cmd("train", "model_name_or_path=/nonexistent/model"), env={**warm, "OMP_NUM_THREADS": "7"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert len(_children(warm)) == before
    status = subprocess.run(_cmd("warm", "status"), env={**warm, "OMP_NUM_THREADS": "7"}, capture_output=True, text=True)
    assert "not running for this environment" in status.stdout and "other warm process(es)" in status.stdout
    assert "warm: running (pid" in subprocess.run(_cmd("warm", "status"), env=warm, capture_output=True, text=True).stdout


@pytest.mark.parametrize("how", ["sigint to the command", "command killed"])
def test_stopping_the_command_stops_training_gracefully(warm, tiny_qwen, data_dir, tmp_path, how):
    out = tmp_path / "out"
    args = _train_args(tiny_qwen, data_dir, out, max_steps=400, save_strategy="steps", save_steps=1000, learning_rate=1e-4)
    proc = subprocess.Popen(_cmd("train", *args), env=warm, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = out / "trainer_log.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (log.is_file() and log.read_text().count("\n") >= 2):
        time.sleep(0.2)
    if how == "sigint to the command":
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=120)[0]
        assert proc.returncode == 130, output
        assert "received SIGINT" in output
    else:
        proc.kill()  # the child notices its caller is gone and stops as on SIGTERM
        proc.communicate(timeout=60)
        deadline = time.time() + 120
        while time.time() < deadline and not list(out.glob("checkpoint-*/tunekit_complete.json")):
            time.sleep(0.2)
    ckpts = sorted(out.glob("checkpoint-*"))
    assert len(ckpts) == 1 and (ckpts[0] / "tunekit_complete.json").is_file()
    assert 2 <= int(ckpts[0].name.split("-")[1]) < 400


def test_a_command_killed_by_a_signal_exits_as_a_shell_reports_it(warm, tiny_qwen, data_dir, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(_cmd("train", *_train_args(tiny_qwen, data_dir, out, max_steps=400)), env=warm,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = out / "trainer_log.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (log.is_file() and log.read_text().count("\n") >= 1):
        time.sleep(0.2)
    child = int(_children(warm)[-1].split(" child ")[1].split(":")[0])
    os.kill(child, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGKILL  # as the cold program killed by SIGKILL reads in a shell


def test_chat_reads_the_callers_stdin(warm, tiny_qwen):
    args = ("chat", f"model_name_or_path={tiny_qwen}", "template=qwen", "max_new_tokens=6", "do_sample=false")
    hot = subprocess.run(_cmd(*args), input="hello\nhow are you?\n", env=warm, capture_output=True, text=True, timeout=300)
    cold = subprocess.run(_cmd(*args), input="hello\nhow are you?\n", env={**warm, "TUNEKIT_WARM": "0"},
                          capture_output=True, text=True, timeout=300)
    assert hot.returncode == cold.returncode == 0, hot.stderr + cold.stderr
    assert hot.stdout == cold.stdout and hot.stdout  # the replies to the two lines the caller piped in
    assert "tunekit chat" in _children(warm)[-1]


def test_a_killed_warm_process_leaves_commands_cold_and_can_be_restarted(tmp_path):
    from tunekit.cli import warm

    env = {**os.environ, "TUNEKIT_CACHE": str(tmp_path / "cache")}
    env.pop("TUNEKIT_WARM", None)
    assert subprocess.run(_cmd("warm", "start"), env=env, capture_output=True, timeout=300).returncode == 0
    try:
        sock = warm.socket_path(env)
        os.kill(int(sock.with_suffix(".pid").read_text()), signal.SIGKILL)
        time.sleep(0.5)
        assert sock.exists()  # left behind: the next command must not hang on it
        proc = subprocess.run(_cmd("train", "model_name_or_path=/nonexistent/model"), env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 2 and "does not exist" in proc.stderr
        assert "not running" in subprocess.run(_cmd("warm", "status"), env=env, capture_output=True, text=True).stdout
        again = subprocess.run(_cmd("warm", "start"), env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0 and "ready (pid" in again.stdout, again.stdout + again.stderr
    finally:
        stopped = subprocess.run(_cmd("warm", "stop"), env=env, capture_output=True, text=True, timeout=60).stdout
    assert "stopped 1 process(es)" in stopped and not sock.exists()
