"""Start one process per device by re-executing ``tunekit train`` under torchrun.

LLaMA-Factory users know the switches: ``FORCE_TORCHRUN=1``, ``NPROC_PER_NODE``, ``NNODES``, ``NODE_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``. The parent stays alive while torchrun runs, forwards its output as it
comes, and when a rank fails prints one summary line that names the failing rank (the one that caused the failure,
whatever order torchrun noticed the exits in: :func:`cause_of`), its error and, on a communication timeout, the
``NCCL_*``/``GLOO_*`` settings that usually fix it. torchrun and its ranks die with their launcher, even a SIGKILLed
one (:func:`die_with_parent`). SIGTERM to the parent goes on to torchrun, which passes it to the ranks (each stops
after its step with a checkpoint); a second SIGTERM or Ctrl+C kills them (:class:`StopForwarding`). No torch
import here: this runs before anything heavy.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from ...config.lists import split_list
from ...config.problems import config_error
from ...env import env_flag, env_nodes

LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
DEFAULT_MULTINODE_PORT = 29500
_TAIL_BYTES = 64 * 1024
TIMEOUT_HINT = (
    "A collective operation timed out: one rank stopped answering (it crashed, hung, or is still busy, e.g. "
    "tokenizing on rank 0). Raise ddp_timeout if a long preprocessing step is expected (or tokenize once with "
    "tokenized_path); on several machines check that every node reaches MASTER_ADDR:MASTER_PORT, set "
    "NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME to the network interface the nodes share, NCCL_IB_DISABLE=1 without "
    "InfiniBand, NCCL_P2P_DISABLE=1 if GPUs cannot talk peer-to-peer, and NCCL_DEBUG=INFO to see where it stops."
)
TIMEOUT_PATTERNS = re.compile(r"timed? ?out|Timeout\(ms\)|Watchdog caught collective|DistBackendError", re.IGNORECASE)


def under_launcher(env: Mapping[str, str] | None = None) -> bool:
    """True inside torchrun, ``accelerate launch`` or the ``deepspeed`` launcher (they all set these)."""
    env = os.environ if env is None else env
    return any(name in env for name in LAUNCHER_VARS)


def visible_device_count(env: Mapping[str, str] | None = None) -> int:
    """CUDA devices this process may use (CUDA_VISIBLE_DEVICES respected), without importing torch on a CPU box."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = split_list(visible)
        return 0 if not ids or ids[0].startswith("-") else len(ids)
    if not os.path.isdir("/proc/driver/nvidia/gpus"):
        return 0
    import torch  # a GPU box: torch's count also covers MIG and driver quirks

    return torch.cuda.device_count()


@dataclass(frozen=True)
class LaunchPlan:
    """How many processes tunekit starts, and where they meet."""

    launch: bool
    nproc_per_node: int
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int | None  # None: pick a free one at launch (single node only)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes if self.launch else 1


def _env_int(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise config_error("launch_not_whole", name=name, value=repr(raw)) from None
    if value < minimum:
        raise config_error("launch_too_small", name=name, value=value, minimum=minimum)
    return value


def launch_plan(env: Mapping[str, str] | None = None, use_cpu: bool = False) -> LaunchPlan:
    """Decide from the environment whether ``tunekit train`` re-executes under torchrun."""
    env = os.environ if env is None else env
    devices = 0 if use_cpu else visible_device_count(env)
    nnodes = env_nodes(env)
    node_rank = _env_int(env, "NODE_RANK", 0)
    if node_rank >= nnodes:
        raise config_error("launch_node_rank", rank=node_rank, nodes=nnodes)
    nproc = _env_int(env, "NPROC_PER_NODE", max(devices, 1), minimum=1)
    if devices and nproc > devices:
        visible = env.get("CUDA_VISIBLE_DEVICES", "unset")
        raise config_error("launch_too_many_procs", nproc=nproc, devices=devices, visible=visible)
    launch = not under_launcher(env) and (env_flag("FORCE_TORCHRUN", False, env) or devices > 1 or nnodes > 1)
    master_addr = env.get("MASTER_ADDR", "").strip()
    if nnodes > 1 and not master_addr:
        raise config_error("launch_master_addr", nodes=nnodes, port=DEFAULT_MULTINODE_PORT)
    port_text = env.get("MASTER_PORT", "").strip()
    port = _env_int(env, "MASTER_PORT", 0, minimum=1) if port_text else None
    if port is not None and port > 65535:
        raise config_error("launch_bad_port", port=port)
    if port is None and nnodes > 1:
        port = DEFAULT_MULTINODE_PORT
    return LaunchPlan(launch, nproc, nnodes, node_rank, master_addr or "127.0.0.1", port)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def check_port_free(port: int, host: str = "") -> None:
    """The rendezvous port must be free on the machine that hosts it (NODE_RANK 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            raise config_error("launch_port_in_use", port=port, free=free_port()) from None


def torchrun_command(plan: LaunchPlan, port: int, argv: list[str], log_dir: str | None = None) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "tunekit.train.engines.launcher",  # torchrun (see torchrun_main)
        "--nnodes",
        str(plan.nnodes),
        "--node_rank",
        str(plan.node_rank),
        "--nproc_per_node",
        str(plan.nproc_per_node),
        "--master_addr",
        plan.master_addr,
        "--master_port",
        str(port),
    ]
    if log_dir:
        cmd += ["--log_dir", log_dir]
    return cmd + ["-m", "tunekit.cli.main", "train", *argv]


def relaunch(plan: LaunchPlan, argv: list[str], env: Mapping[str, str] | None = None) -> int:
    """Run ``argv`` under torchrun and return its exit code; on failure print a summary on stderr."""
    env = dict(os.environ if env is None else env)
    port = plan.master_port
    if port is None:
        port = free_port()
    elif plan.node_rank == 0:
        check_port_free(port)
    env["MASTER_PORT"] = str(port)
    env[PARENT_PID_ENV] = str(os.getpid())  # torchrun ends when this process does, even killed (die_with_parent)
    env.pop("FORCE_TORCHRUN", None)  # the ranks see RANK/WORLD_SIZE and never relaunch anyway
    where = f"{plan.master_addr}:{port}"
    nodes = f" on node {plan.node_rank} of {plan.nnodes}" if plan.nnodes > 1 else ""
    sys.stderr.write(f"tunekit: starting {plan.nproc_per_node} processes{nodes} with torchrun (rendezvous {where})\n")
    sys.stderr.flush()
    with tempfile.TemporaryDirectory(prefix="tunekit-torchrun-") as log_dir:
        rc, tail, stopped = _run_forwarding_stderr(torchrun_command(plan, port, argv, log_dir), env)
        if stopped is not None:  # the ranks' ends are the stop's, not a failure to summarize
            sys.stderr.write(f"tunekit: the run was stopped by {stopped.name}\n")
            return 128 + int(stopped)
        if rc != 0:
            sys.stderr.write(failure_summary(rc, tail, read_error_files(log_dir)) + "\n")
    return rc


class StopSignals:
    """While a launch runs, the launching process's SIGTERM and SIGINT go to the subclass's ``_handle`` (main thread
    only; elsewhere nothing changes); ``received`` lists them."""

    def __init__(self):
        self.received: list = []
        self._previous: dict = {}

    def __enter__(self):
        import signal

        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError):  # not the main thread
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class StopForwarding(StopSignals):
    """While torchrun runs, the parent's SIGTERM and SIGINT.

    The first SIGTERM is forwarded to torchrun, which sends it to the ranks (each finishes its step, saves a
    checkpoint and ends: ``train/callbacks.GracefulStopCallback``) and kills those still running 30 s later. The first
    SIGINT is torchrun's own too (a terminal or the board signals the whole process group): it is waited for, as
    before. A second SIGTERM or SIGINT kills torchrun, and with it the ranks (:func:`die_with_parent`)."""

    def __init__(self, proc: subprocess.Popen):
        super().__init__()
        self.proc = proc

    @property
    def stopped(self):
        """The first signal, when it was SIGTERM (the run ends because of it), else None."""
        import signal

        return self.received[0] if self.received and self.received[0] == signal.SIGTERM else None

    def _handle(self, signum, frame) -> None:
        import signal

        self.received.append(signal.Signals(signum))
        if len(self.received) > 1:
            _say(f"tunekit: {self.received[-1].name} again: killing torchrun and its ranks now")
            self.proc.kill()
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            _say(
                "tunekit: SIGTERM: torchrun stops the ranks (each saves a checkpoint after its current step); send "
                "SIGTERM or press Ctrl+C again to kill them now"
            )
            self.proc.send_signal(signal.SIGTERM)


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _run_forwarding_stderr(cmd: list[str], env: Mapping[str, str]) -> tuple[int, str, object]:
    """Run ``cmd``; copy its stderr through as it arrives (progress bars too) and keep the last 64 KB. Returns the
    exit code, that tail, and the signal that stopped the run (:class:`StopForwarding`), if any."""
    proc = subprocess.Popen(cmd, env=dict(env), stderr=subprocess.PIPE)
    tail = bytearray()
    out = sys.stderr.buffer if hasattr(sys.stderr, "buffer") else None
    with StopForwarding(proc) as stops:
        try:
            while True:
                chunk = os.read(proc.stderr.fileno(), 8192)
                if not chunk:
                    break
                if out is not None:
                    out.write(chunk)
                    out.flush()
                else:
                    sys.stderr.write(chunk.decode("utf-8", "replace"))
                tail += chunk
                del tail[:-_TAIL_BYTES]
            return proc.wait(), tail.decode("utf-8", "replace"), stops.stopped
        except KeyboardInterrupt:  # the terminal sent SIGINT to torchrun as well; let it stop its ranks
            try:
                return proc.wait(timeout=60), tail.decode("utf-8", "replace"), stops.stopped
            except subprocess.TimeoutExpired:
                proc.kill()
                raise


def read_error_files(log_dir: str) -> dict[int, str]:
    """``{local_rank: message}`` from the error files torchrun gives each rank (written by tunekit's CLI)."""
    found: dict[int, tuple[int, str]] = {}
    for path in glob.glob(os.path.join(log_dir, "**", "error.json"), recursive=True):
        try:
            with open(path, encoding="utf-8") as fp:
                data = json.load(fp)
            rank = int(os.path.basename(os.path.dirname(path)))
        except (OSError, ValueError):
            continue
        message = data.get("message", {})
        text = message.get("message", "") if isinstance(message, dict) else str(message)
        stamp = int(message.get("extraInfo", {}).get("timestamp", 0)) if isinstance(message, dict) else 0
        found[rank] = (stamp, text)
    return {rank: text for rank, (_, text) in sorted(found.items(), key=lambda kv: (kv[1][0], kv[0]))}


_FAILURE = re.compile(
    r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*exitcode\s*:\s*(-?\d+)(?:\s*\(pid:\s*\d+\))?[ \t]*(?:\((\w+)\))?"
)
# A rank that lost its peer says so in its own error (gloo, NCCL, sockets): it stopped because of another rank.
PEER_LOST = re.compile(
    r"Connection (reset|closed) by peer|Broken pipe|ECONNRESET|remote process exited|"
    r"NCCL communicator was aborted|peer .{0,40}(closed|exited|died)",
    re.IGNORECASE,
)
# Signals a rank gets because of the others (torchrun stops the survivors with SIGTERM; a collective library aborts
# a rank whose peer vanished with SIGABRT): a rank killed by any other signal is the cause.
_FOLLOWER_SIGNALS = ("SIGTERM", "SIGABRT")


@dataclass(frozen=True)
class RankFailure:
    """One entry of torchrun's failure table."""

    rank: int
    local_rank: int
    exitcode: int
    signal: str | None  # e.g. SIGKILL, when the exit code is a signal
    root: bool  # torchrun's "Root Cause (first observed failure)": the first it saw, not always the first to fail


def rank_failures(tail: str) -> list[RankFailure]:
    """Every failed rank in the last failure table torchrun printed in ``tail`` (root cause included)."""
    start = tail.rfind("Failures:")
    table = tail[start:] if start >= 0 else tail[max(tail.rfind("Root Cause"), 0) :]
    root_at = table.find("Root Cause")
    out = []
    for match in _FAILURE.finditer(table):
        code = int(match.group(3))
        name = match.group(4) or (f"signal {-code}" if code < 0 else None)
        out.append(RankFailure(int(match.group(1)), int(match.group(2)), code, name, 0 <= root_at < match.start()))
    return out


def cause_of(failures: list[RankFailure], errors: Mapping[int, str]) -> RankFailure | None:
    """The rank that made the job fail, whatever order torchrun noticed the exits in: a rank killed by a signal of
    its own (SIGKILL, SIGSEGV ...) first, then one that wrote an error other than a lost peer, then one that did not
    lose a peer, then torchrun's root cause."""

    def signalled(f: RankFailure) -> bool:
        return f.exitcode < 0 and f.signal not in _FOLLOWER_SIGNALS

    def lost_peer(f: RankFailure) -> bool:
        return bool(PEER_LOST.search(errors.get(f.local_rank, ""))) or f.signal in _FOLLOWER_SIGNALS

    def own_error(f: RankFailure) -> bool:
        return f.local_rank in errors and not lost_peer(f)

    ordered = sorted(failures, key=lambda f: not f.root)  # torchrun's root cause first among equals
    for wanted in (signalled, own_error, lambda f: not lost_peer(f), lambda f: True):
        for failure in ordered:
            if wanted(failure):
                return failure
    return None


def failure_summary(rc: int, tail: str, errors: Mapping[int, str]) -> str:
    """One ``error:`` paragraph: which rank failed first (:func:`cause_of`), with what, and hints on a timeout."""
    failures = rank_failures(tail)
    cause = cause_of(failures, errors)
    if cause is not None:
        local, code, signal_name = cause.local_rank, cause.exitcode, cause.signal
        who = f"rank {cause.rank} (local rank {local})"
        if local in errors and code >= 0:
            text = f"error: distributed training failed: {who} stopped first with: {strip_class(errors[local])}"
        else:
            how = f"was killed by {signal_name}" if code < 0 else f"exited with code {code}"
            text = f"error: distributed training failed: {who} {how}; its output above shows why."
            if signal_name == "SIGKILL" or code == -9:
                text += (
                    " A SIGKILL without a Python error is usually the out-of-memory killer: lower the batch size "
                    "or cutoff_len, or shard with deepspeed (z2/z3, offload)."
                )
        followers = sorted(
            {r for r in errors if r != local} | {f.local_rank for f in failures if f.local_rank != local}
        )
        if followers:
            text += f" The other ranks stopped because of it (local rank(s) {', '.join(map(str, followers))})."
    elif errors:
        local, message = next(iter(errors.items()))
        text = f"error: distributed training failed: local rank {local} stopped first with: {strip_class(message)}"
    else:
        text = f"error: distributed training failed (torchrun exit code {rc}); see the ranks' output above."
    if TIMEOUT_PATTERNS.search(tail) or any(TIMEOUT_PATTERNS.search(m) for m in errors.values()):
        text += "\n" + TIMEOUT_HINT
    return text


def strip_class(message: str) -> str:
    """``ConfigError: text`` -> ``text`` for tunekit's own errors (their text is complete); others keep the class."""
    for prefix in ("TunekitError: ", "ConfigError: ", "DataError: ", "ModelError: ", "EnvironmentProblem: "):
        if message.startswith(prefix):
            return message[len(prefix) :].strip()
    return message.strip()


PARENT_PID_ENV = "TUNEKIT_PARENT_PID"  # set by tunekit's launch for its child: the pid it must not outlive
#: a file whose existence asks the ranks to stop after their step with a checkpoint (train/callbacks.py), where the
#: launcher cannot signal them (Ray Train: ray_launch.StopByFile)
STOP_FILE_ENV = "TUNEKIT_STOP_FILE"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(env: dict | None = None) -> bool:
    """When tunekit started this process (``TUNEKIT_PARENT_PID``: tunekit train for torchrun, torchrun for a rank),
    ask Linux to SIGKILL it when that parent dies (``prctl(PR_SET_PDEATHSIG)``), so killing a run's launcher, even
    with SIGKILL, ends its ranks instead of leaving them running as orphans. A parent that died before this call
    ends this process now. The variable is removed (a process started from here is not tunekit's rank). True when
    armed; a no-op off Linux or without the variable."""
    env = os.environ if env is None else env
    raw = env.pop(PARENT_PID_ENV, "")
    if not raw.strip().isdigit() or not sys.platform.startswith("linux"):
        return False
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != int(raw):  # the parent is gone already (this process was re-parented)
        os._exit(128 + int(signal.SIGKILL))
    return True


def torchrun_main() -> int:
    """``python -m tunekit.train.engines.launcher ARGS`` = ``torchrun ARGS`` without torchrun's own Python traceback
    when a rank fails: its failure table (which rank failed first, with what) is still printed, and
    :func:`failure_summary` reads it; the traceback of the launcher itself would only bury the rank's error."""
    die_with_parent()  # tunekit train was killed: so is torchrun, and (below) so are its ranks
    os.environ[PARENT_PID_ENV] = str(os.getpid())  # each rank arms die_with_parent for this process (cli/train_cmd.py)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main

    try:
        main()
    except ChildFailedError as exc:
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
        return 1
    except SignalException as exc:  # SIGTERM/SIGINT: torchrun stopped its ranks (tunekit train says so)
        return 128 + int(exc.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(torchrun_main())
