"""Killing the launcher of a distributed run ends its ranks (train/engines/launcher.py: die_with_parent).

``tunekit train`` with ``FORCE_TORCHRUN=1 NPROC_PER_NODE=2`` starts torchrun, which starts 2 ranks. SIGKILL to torchrun,
or to ``tunekit train`` itself, must leave no rank running. The kill is sent as soon as both ranks exist, wherever
they are in their start-up: a rank that has armed its parent-death signal is killed with torchrun, one that has not
yet finds its parent gone when it arms it and exits, so the outcome does not depend on timing.
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

from tests.helpers import alpaca_records, base_config, write_dataset

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 300  # torchrun starting 2 interpreters on a loaded 2-core host
GONE_TIMEOUT = 60  # generous: a rank still importing reaches the check in a few seconds, an armed one dies at once


def _rank_of(process) -> str | None:
    try:
        return process.environ().get("RANK")
    except Exception:  # exited meanwhile, or not ours to read
        return None


def _start(tmp_path: Path, tiny_qwen: Path):
    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(8, seed=1))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(base_config(tiny_qwen, data, tmp_path / "out", max_steps=100000, per_device_train_batch_size=1)))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    env.update(CUDA_VISIBLE_DEVICES="", FORCE_TORCHRUN="1", NPROC_PER_NODE="2", PYTHONPATH=str(ROOT / "src"))
    return subprocess.Popen([sys.executable, "-m", "tunekit.cli.main", "train", str(cfg)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)


@pytest.mark.parametrize("victim", ["torchrun", "tunekit train"])
def test_killing_the_launcher_with_sigkill_ends_every_rank(tiny_qwen, tmp_path, victim):
    import psutil

    proc = _start(tmp_path, tiny_qwen)
    family: list = []
    try:
        top = psutil.Process(proc.pid)
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
