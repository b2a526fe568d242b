"""Shared helpers for the benchmarks: where things are, and running a command while measuring it.

Every benchmark measures tunekit from ``benchmarks/.venv-base``: a venv with tunekit's BASE install
only. The test venv (``.venv``) also has bitsandbytes and deepspeed, and their presence alone makes
``import transformers``/``import peft`` seconds slower (they probe for them), which a user who ran
``pip install tunekit`` does not pay. Create it with (from the repository root)::

    python3 -m venv benchmarks/.venv-base
    benchmarks/.venv-base/bin/pip install torch==2.13.0
    benchmarks/.venv-base/bin/pip install -c constraints.txt -e .

(``python benchmarks/run_all.py`` does this when the venv is missing.)
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASE_VENV = REPO / "benchmarks" / ".venv-base"
SHARED = Path(os.environ.get("TUNEKIT_SHARED", REPO.parent / "shared"))
LF_BASELINE = SHARED / "bench" / "llamafactory-baseline"
LF_DATA = SHARED / "reference-data" / "llamafactory"
LF_VENV = Path(os.environ.get("LF_VENV", Path.home() / ".cache" / "lf-venv"))
WORK = Path(os.environ.get("TUNEKIT_BENCH_WORK", Path.home() / ".cache" / "tunekit-bench"))


def base_python() -> Path:
    return BASE_VENV / "bin" / "python"


def ensure_base_venv() -> Path:
    """Create benchmarks/.venv-base (torch first, then tunekit without extras) if it does not exist."""
    py = base_python()
    if (BASE_VENV / ".ok").is_file() and py.exists():
        return py
    print(f"[bench] creating {BASE_VENV} (tunekit base install, no extras) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(BASE_VENV)], check=True)
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run(pip + ["torch==2.13.0"], check=True)
    subprocess.run(pip + ["-c", str(REPO / "constraints.txt"), "-e", str(REPO)], check=True)
    (BASE_VENV / ".ok").touch()
    return py


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


@dataclass
class Measured:
    """One run of a command: wall time, CPU time and peak memory of its process tree."""

    rc: int
    wall_s: float
    cpu_s: float  # user + sys of the process and every waited-for descendant (rusage of wait4)
    maxrss_mb: float  # largest single process (what /usr/bin/time -v reports)
    tree_rss_mb: float  # largest sum over the live process tree (psutil, sampled)
    t_start: float  # time.time() just before the process was spawned
    marks: dict[str, float] = field(default_factory=dict)  # name -> seconds after t_start
    load_before: str = ""
    load_after: str = ""


def run_measured(
    cmd: list[str],
    *,
    env: dict | None = None,
    cwd: str | Path | None = None,
    log: Path | None = None,
    watch: dict | None = None,
    interval: float = 0.02,
    rss_interval: float = 0.25,
) -> Measured:
    """Run ``cmd``; sample the tree's RSS and call ``watch[name]() -> bool`` until each first returns True.

    ``watch`` callables (keep them cheap: an ``os.stat``) are polled every ``interval`` s from a side
    thread; the first time one returns True, its time (seconds after spawn) is recorded in ``marks`` --
    e.g. "the first line appeared in trainer_log.jsonl". The process tree's RSS is summed every
    ``rss_interval`` s (walking the tree is the expensive part: it must not steal the measured CPU).
    """
    import psutil

    watch = dict(watch or {})
    marks: dict[str, float] = {}
    peak_tree = 0
    done = threading.Event()
    with open(log, "wb") if log else contextlib.nullcontext(subprocess.DEVNULL) as out:
        load_before = loadavg()
        t0 = time.time()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)

    def sampler() -> None:
        nonlocal peak_tree
        try:
            root = psutil.Process(proc.pid)
        except psutil.Error:
            return
        next_rss = 0.0
        while not done.is_set():
            now = time.time()
            for name in [n for n in watch if n not in marks]:
                try:
                    if watch[name]():
                        marks[name] = now - t0
                except Exception:
                    pass
            if now >= next_rss:
                next_rss = now + rss_interval
                total = 0
                try:
                    procs = [root] + root.children(recursive=True)
                except psutil.Error:
                    procs = []
                for p in procs:
                    with contextlib.suppress(psutil.Error):
                        total += p.memory_info().rss
                peak_tree = max(peak_tree, total)
            done.wait(interval if len(marks) < len(watch) else min(rss_interval, 0.25))

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.time() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    thread.join()
    return Measured(
        rc=proc.returncode,
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        maxrss_mb=usage.ru_maxrss / 1024,
        tree_rss_mb=peak_tree / 2**20,
        t_start=t0,
        marks=marks,
        load_before=load_before,
        load_after=loadavg(),
    )


def med(values: list[float]) -> float:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def fmt(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}f}"
