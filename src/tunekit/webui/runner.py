"""One background tunekit job per board: start, stop, and the state a reloaded page reattaches to.

The job is a child process (``python -P -m tunekit.cli.main <verb> ...``, never a shell; ``-P`` and
``PYTHONSAFEPATH=1``, which its own children such as torchrun workers inherit, keep the working folder off
the import path), with secrets passed in its environment, never on its command line, in its own
process group so Stop can send SIGINT to the trainer and any workers it started: the trainer then
saves its last checkpoint and exits. A second Stop sends SIGTERM. The job's state lives in the
server, not in the page, so a browser refresh finds the running job again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.problems import Said
from ..config.secrets import mask_secrets
from ..env import ERROR_FILE_ENV, RESET_SIGINT_ENV
from ..errors import TunekitError
from .command import verb_argv

JOBS_DIR = ".tunekit_cache/webui_jobs"  # under the board's working folder (git-ignored)


class JobBusy(TunekitError, RuntimeError):
    """A second job while one runs; its message is keyed (``board_job_running``), so the board says it in the page's
    language (``problems_zh.say_error``)."""


@dataclass
class Job:
    verb: str
    args: list[str]
    output_dir: Path
    log_path: Path
    form: dict[str, Any] = field(default_factory=dict)  # the form it was started from (for reattaching)
    kind: str = "train"  # train | eval | export: which tab started it
    proc: subprocess.Popen | None = None
    returncode: int | None = None
    stop_requests: int = 0
    started: float = field(default_factory=time.time)  # files written before this are not this job's

    @property
    def running(self) -> bool:
        return self.proc is not None and self.returncode is None

    @property
    def error_path(self) -> Path:
        """Where the job's ``tunekit`` writes its keyed error if it fails with one (``env.ERROR_FILE_ENV``)."""
        return self.log_path.with_suffix(".error.json")

    @property
    def state(self) -> str:
        if self.running:
            return "stopping" if self.stop_requests else "running"
        if self.stop_requests:
            return "stopped"
        return "finished" if self.returncode == 0 else "failed"


class JobRunner:
    """Runs at most one job at a time."""

    def __init__(self, cwd: str | Path | None = None):
        self.cwd = Path(cwd or os.getcwd())
        self.job: Job | None = None
        self.last: dict[str, Job] = {}  # the newest job of each kind: what each tab's area shows
        self._lock = threading.Lock()

    def poll(self) -> Job | None:
        with self._lock:
            job = self.job
            if job is not None and job.proc is not None and job.returncode is None:
                code = job.proc.poll()
                if code is not None:
                    job.returncode = code
            return job

    def newest(self, kinds: tuple[str, ...]) -> Job | None:
        """The newest job of one of ``kinds`` (a tab's), running or ended."""
        self.poll()
        return max((self.last[k] for k in kinds if k in self.last), key=lambda job: job.started, default=None)

    @property
    def busy(self) -> bool:
        job = self.poll()
        return job is not None and job.running

    def start(
        self,
        verb: str,
        args: list[str],
        output_dir: str | Path,
        *,
        form: dict | None = None,
        kind: str = "train",
        env: dict[str, str] | None = None,
    ) -> Job:
        """Run ``tunekit <verb> args``; ``env`` adds variables (the secrets ``args`` refer to as ${VAR})."""
        argv = verb_argv(verb, args)
        if self.busy:
            raise JobBusy(Said("board_job_running"))
        out = Path(output_dir)
        if not out.is_absolute():
            out = self.cwd / out
        # The log lives beside the runs, not in output_dir: the trainer refuses a non-empty output_dir.
        log_dir = self.cwd / JOBS_DIR
        log_dir.mkdir(parents=True, exist_ok=True)
        stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{verb}"
        log_path = log_dir / f"{stem}.log"
        n = 1
        while log_path.exists():
            n += 1
            log_path = log_dir / f"{stem}-{n}.log"
        env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1", RESET_SIGINT_ENV: "1"}
        env[ERROR_FILE_ENV] = str(log_path.with_suffix(".error.json"))  # Job.error_path
        env.pop("GRADIO_SERVER_NAME", None)
        with self._lock:
            log = os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
            log.write(f"$ tunekit {verb} {' '.join(_masked(args))}\n".encode())
            log.flush()
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=self.cwd,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,
                )
            finally:
                log.close()  # the child holds its own copy
            self.job = self.last[kind] = Job(verb, list(args), out, log_path, dict(form or {}), kind, proc)
            return self.job

    def stop(self) -> Job | None:
        """First call: SIGINT (clean stop, last checkpoint kept); later calls: SIGTERM."""
        job = self.poll()
        if job is None or not job.running or job.proc is None:
            return job
        job.stop_requests += 1
        sig = signal.SIGINT if job.stop_requests == 1 else signal.SIGTERM
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.proc.pid, sig)
        return job

    def wait(self, timeout: float | None = None) -> int | None:
        job = self.job
        if job is None or job.proc is None:
            return None
        try:
            job.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.poll().returncode  # type: ignore[union-attr]

    def shutdown(self, grace_s: float = 20.0) -> None:
        """When the board exits: stop its job the clean way (SIGINT), then SIGTERM after ``grace_s``."""
        job = self.poll()
        if job is None or not job.running:
            return
        self.stop()
        if self.wait(grace_s) is None:
            self.stop()
            self.wait(5)


def _masked(args: list[str]) -> list[str]:
    """``key=value`` arguments with secret values shown as their ${ENV_VAR} reference (for the log)."""
    out = []
    for arg in args:
        key, sep, value = arg.partition("=")
        out.append(f"{key}={mask_secrets({key: value})[key]}" if sep else arg)
    return out
