"""Killing the launcher of a distributed run ends its ranks (train/engines/launcher.py: die_with_parent), and
SIGTERM to ``tunekit train`` is forwarded to torchrun, which stops the ranks (launcher.StopForwarding).

``tunekit train`` with ``FORCE_TORCHRUN=1 NPROC_PER_NODE=2`` starts torchrun, which starts 2 ranks. SIGKILL to
torchrun, or to ``tunekit train`` itself, must leave no rank running. The kill is sent as soon as both ranks exist,
wherever they are in their start-up: a rank that has armed its parent-death signal is killed with torchrun, one that
has not yet finds its parent gone when it arms it and exits, so the outcome does not depend on timing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, alpaca_records, base_config, write_dataset

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
START_TIMEOUT = 300  # torchrun starting 2 interpreters on a loaded 2-core host
GONE_TIMEOUT = 60  # generous: a rank still importing reaches the check in a few seconds, an armed one dies at once


def _rank_of(process) -> str | None:
    try:
        return process.environ().get("RANK")
    except Exception:  # exited meanwhile, or not ours to read
        return None


def _start(tmp_path: Path, tiny_qwen: Path, stderr=subprocess.DEVNULL):
    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(8, seed=1))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        yaml.safe_dump(base_config(tiny_qwen, data, tmp_path / "out", max_steps=100000, per_device_train_batch_size=1))
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    env.update(CUDA_VISIBLE_DEVICES="", FORCE_TORCHRUN="1", NPROC_PER_NODE="2", PYTHONPATH=str(ROOT / "src"))
    return subprocess.Popen(
        [sys.executable, "-m", "tunekit.cli.main", "train", str(cfg)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        cwd=tmp_path,
    )


def _ranks_started(proc, top) -> tuple[list, list, list]:
    """Wait until both ranks exist: (the whole family, the ranks, torchrun)."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        family = top.children(recursive=True)
        ranks = [p for p in family if _rank_of(p) in ("0", "1")]
        if len(ranks) == 2:
            break
        assert proc.poll() is None, "tunekit train ended before its ranks started"
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.1)
    torchrun = [p for p in top.children() if "tunekit.train.engines.launcher" in " ".join(p.cmdline())]
    assert len(torchrun) == 1, top.children()
    return family, ranks, torchrun


@pytest.mark.parametrize("victim", ["torchrun", "tunekit train"])
def test_killing_the_launcher_with_sigkill_ends_every_rank(tiny_qwen, tmp_path, victim):
    import psutil

    proc = _start(tmp_path, tiny_qwen)
    family: list = []
    try:
        top = psutil.Process(proc.pid)
        family, ranks, torchrun = _ranks_started(proc, top)
        (torchrun[0] if victim == "torchrun" else top).send_signal(signal.SIGKILL)
        deadline = time.monotonic() + GONE_TIMEOUT
        while any(_running(p) for p in [*ranks, *torchrun]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p.pid for p in [*ranks, *torchrun] if _running(p)]
    finally:
        for p in family:
            if _running(p):
                p.kill()
        proc.kill()
        proc.wait(timeout=60)


def _running(process) -> bool:
    """Alive and not a zombie (a dead process whose new parent has not reaped it yet is gone for this test)."""
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


STOP_TIMEOUT = 180  # torchrun gives the ranks 30 s to stop after its SIGTERM, then kills them; a loaded host is slow
FIRST = "tunekit: SIGTERM: torchrun stops the ranks (each saves a checkpoint after its current step)"


@pytest.mark.parametrize("signals", [1, 2])
def test_sigterm_to_tunekit_train_is_forwarded_and_a_second_one_kills(tiny_qwen, tmp_path, signals):
    """The first SIGTERM goes on to torchrun (the parent stays to report, and exits 128 + 15); a second one, sent
    once the parent said it forwarded the first, kills torchrun and so the ranks. Either way no rank survives.
    Before: the parent died of the signal at once (exit -15) and its ranks with it (SIGKILL, no clean stop)."""
    import psutil

    log = tmp_path / "stderr.txt"
    with log.open("wb") as err:
        proc = _start(tmp_path, tiny_qwen, stderr=err)
    family: list = []
    try:
        top = psutil.Process(proc.pid)
        family, ranks, torchrun = _ranks_started(proc, top)
        top.send_signal(signal.SIGTERM)
        if signals == 2:
            deadline = time.monotonic() + GONE_TIMEOUT
            while FIRST not in log.read_text(errors="replace") and time.monotonic() < deadline:
                time.sleep(0.1)
            assert FIRST in log.read_text(errors="replace")
            top.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT) == 128 + signal.SIGTERM
        deadline = time.monotonic() + GONE_TIMEOUT  # a rank SIGKILLed as torchrun ended may take a moment to go
        while any(_running(p) for p in [*ranks, *torchrun]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p.pid for p in [*ranks, *torchrun] if _running(p)]
        text = log.read_text(errors="replace")
        assert FIRST in text and text.rstrip().endswith("tunekit: the run was stopped by SIGTERM"), text[-3000:]
        assert ("tunekit: SIGTERM again: killing torchrun and its ranks now" in text) == (signals == 2), text[-3000:]
        assert "distributed training failed" not in text, text[-3000:]
    finally:
        for p in family:
            if _running(p):
                p.kill()
        proc.kill()
        proc.wait(timeout=60)
