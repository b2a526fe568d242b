"""``tunekit warm``: keep torch & co. imported in a background process; each command forks from it.

A cold ``tunekit train`` spends 3-4 s importing before it reads a line of data (on a 2-core machine
``import torch`` alone takes 1.5 s, torch + transformers + peft + datasets + the Trainer 3.3 s). For one
long GPU run that is noise; for the loop of editing a config and smoke-testing it on a tiny model it is
most of the wait. ``tunekit warm start`` starts a server that does those imports once and waits on a
Unix socket. While it runs, ``tunekit train`` (and the other heavy commands) hand their command line,
working folder, environment and terminal (stdin/stdout/stderr, passed as file descriptors) to it; it
forks a child that is already past the imports, and the child runs the command exactly as the cold
program would: same code, same output on the same terminal, same exit code. Ctrl-C and SIGTERM are
passed on to the child, so a training run still stops gracefully with a checkpoint; if the calling
command disappears, the child gets SIGTERM too; if the child is killed by a signal, the command exits with
128 + that signal, as a shell reports a killed cold program.

When the warm process is *not* used (a cold start instead, silently):
  - none is running for this interpreter, this tunekit source and this environment: the socket name is a
    hash of ``sys.executable``, tunekit's version and the modification times of its source files, and
    the environment variables that libraries read once at import (``HF_*``, ``TRANSFORMERS_*``,
    ``TORCH*``, ``OMP_*``, ``CUDA*`` ...; see :data:`IMPORT_TIME_ENV`). Editing tunekit or changing those
    variables simply makes commands start cold until ``tunekit warm start`` is run again;
  - inside a torchrun/DeepSpeed worker (``LOCAL_RANK`` set) or with ``TUNEKIT_WARM=0``;
  - on systems without ``fork`` and Unix sockets (Linux only).

The warm process holds about 0.5 GB of memory while it waits (the imported libraries; children share it
copy-on-write). It never touches a GPU (CUDA cannot be used in a child forked after CUDA started), exits after
``--idle-minutes`` without commands (default 30), and writes its own messages to
``$TUNEKIT_CACHE/warm/warm.log`` (default ``~/.cache/tunekit/warm``). The sockets live in
``$XDG_RUNTIME_DIR/tunekit`` or ``/tmp/tunekit-UID`` (a socket path is limited to 107 bytes), a folder that
must belong to the user with mode 0700, or no command talks through it.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path

HELP = """usage: tunekit warm [start|stop|status] [--idle-minutes N] [--foreground] [--all]

Keep torch, transformers, peft and datasets imported in a background process, so that train, plan,
export, verify, chat, predict, data and tiny-model start in well under a second instead of 3-5 s.

  start    start the warm process for this environment (returns once it is ready)
  stop     stop this environment's warm process (--all: every one of this user's)
  status   say whether this shell's commands would use a warm process

Commands use a running warm process automatically; TUNEKIT_WARM=0 starts them cold.
"""

# Environment variables some library reads once, at import: a server imported under other values is not used.
IMPORT_TIME_ENV = ("HF_", "HUGGINGFACE", "TRANSFORMERS", "DIFFUSERS", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_",
                   "CUDA", "NCCL", "NVIDIA", "LD_", "PYTHON", "TUNEKIT_CACHE", "TOKENIZERS", "ACCELERATE", "DS_",
                   "DEEPSPEED", "BNB", "MPLBACKEND", "MPLCONFIGDIR")
PRELOAD = ("torch", "transformers", "peft", "datasets", "accelerate", "transformers.trainer",
           "transformers.models.llama.modeling_llama", "transformers.models.qwen2.modeling_qwen2",
           "transformers.models.qwen3.modeling_qwen3", "transformers.models.mistral.modeling_mistral",
           "transformers.models.gemma.modeling_gemma", "transformers.models.gemma2.modeling_gemma2",
           "tunekit.config", "tunekit.plan", "tunekit.plan.checkpointing", "tunekit.data.pipeline",
           "tunekit.model.loader", "tunekit.model.finetuning", "tunekit.train.run", "tunekit.train.stages.sft",
           "tunekit.train.callbacks", "tunekit.train.trainer", "tunekit.train.plotting", "matplotlib.figure",
           "matplotlib.backends.backend_agg")

_HEADER = struct.Struct("!Q")
SUPPORTED = sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(socket, "AF_UNIX")


def log_folder() -> Path:
    from tunekit.env import cache_dir

    return cache_dir("warm")


def socket_folder() -> Path:
    """Where the sockets live: a short path (a Unix socket's path is limited to 107 bytes), private to the user."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "tunekit"
    import tempfile

    return Path(tempfile.gettempdir()) / f"tunekit-{os.getuid()}"


def private_socket_folder(create: bool = False) -> Path | None:
    """The socket folder if it is this user's and nobody else can enter it (else None: never talk through it)."""
    root = socket_folder()
    if create:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        st = root.lstat()
    except FileNotFoundError:
        return None
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return root


def fingerprint(env: dict | None = None) -> str:
    """What a warm process must share with a command to run it: interpreter, tunekit source, import-time env."""
    env = os.environ if env is None else env
    src = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    h.update(sys.executable.encode())
    from tunekit import __version__

    h.update(__version__.encode())
    for path in sorted(src.rglob("*.py")):
        h.update(f"{path.relative_to(src)}:{path.stat().st_mtime_ns}".encode())
    for key in sorted(k for k in env if k.startswith(IMPORT_TIME_ENV)):
        h.update(f"{key}={env[key]}".encode())
    return h.hexdigest()[:20]


def socket_path(env: dict | None = None) -> Path:
    return socket_folder() / f"warm-{fingerprint(env)}.sock"


def usable() -> bool:
    from tunekit.env import env_flag

    return SUPPORTED and env_flag("TUNEKIT_WARM", True) and "LOCAL_RANK" not in os.environ


# ---------------------------------------------------------------------------------------------- client


def run_via_warm(argv: list[str]) -> int | None:
    """Run ``tunekit *argv`` in a warm child if one is ready for this environment; None means start cold."""
    if not usable():
        return None
    root = private_socket_folder()
    if root is None or not any(root.glob("warm-*.sock")):
        return None  # the common case costs a stat and a directory listing
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(socket_path()))
        payload = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
        socket.send_fds(sock, [_HEADER.pack(len(payload))], [0, 1, 2])
        sock.sendall(payload)
        reader = sock.makefile("rb")
        first = reader.readline()
    except OSError:  # none for this environment, or a stale socket (server gone)
        first = b""
    if not first:
        sock.close()
        return None  # start cold
    pid = json.loads(first)["pid"]
    forward = lambda signum, _frame: _kill(pid, signum)  # noqa: E731
    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        line = reader.readline()  # a forwarded signal interrupts it and the read resumes (PEP 475)
        if not line:  # the warm process itself went away, and with it the word on how the child ended
            sys.stderr.write("error: the warm tunekit process ended without reporting how the command ended; "
                             "see `tunekit warm status`\n")
            return 1
        return int(json.loads(line)["exit"])
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sock.close()


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


# ---------------------------------------------------------------------------------------------- server


def serve(path: Path, idle_minutes: float) -> int:
    """Import the stack, then fork a child per request until idle for ``idle_minutes``."""
    import importlib

    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # a CUDA availability check must not start CUDA
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # an optional part (e.g. a model family this transformers lacks): imported cold when needed
    import gc

    gc.collect()
    gc.freeze()  # the imported objects are shared with every child; collections in a child skip them
    torch = sys.modules["torch"]
    if torch.cuda.is_initialized():
        raise RuntimeError("CUDA was started while importing; a forked child could not use it")

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    server.bind(str(tmp))
    os.chmod(tmp, 0o600)
    server.listen(16)
    path.with_suffix(".pid").write_text(str(os.getpid()))  # first: whoever sees the socket finds its pid
    os.replace(tmp, path)  # the socket appears only when it accepts: a client never waits on a half-started server
    print(f"[warm] pid {os.getpid()} ready on {path} (python {sys.executable})", flush=True)

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    children: dict[int, socket.socket] = {}  # pid -> its caller's connection (to report a death by signal)
    idle_since = time.monotonic()
    server.settimeout(1.0)
    try:
        while not stop:
            for pid in list(children):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    _report_exit(children.pop(pid), status)
                    idle_since = time.monotonic()
            if not path.exists() or (not children and time.monotonic() - idle_since > idle_minutes * 60):
                break
            try:
                conn, _ = server.accept()
            except (socket.timeout, InterruptedError):
                continue
            try:
                header, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
                (size,) = _HEADER.unpack(header)
                payload = b""
                while len(payload) < size:
                    chunk = conn.recv(size - len(payload))
                    if not chunk:
                        raise OSError("request cut short")
                    payload += chunk
                request = json.loads(payload)
            except (OSError, ValueError, struct.error) as exc:
                print(f"[warm] bad request: {exc}", flush=True)
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                server.close()
                for other in children.values():
                    other.close()  # other callers' connections are not this child's to hold open
                _child(conn, request, fds)  # never returns
            children[pid] = conn
            print(f"[warm] {time.strftime('%H:%M:%S')} child {pid}: tunekit {' '.join(request['argv'])} (in {request['cwd']})",
                  flush=True)
            for fd in fds:
                os.close(fd)
    finally:
        if path.exists() and path.with_suffix(".pid").is_file() and path.with_suffix(".pid").read_text() == str(os.getpid()):
            path.unlink(missing_ok=True)
            path.with_suffix(".pid").unlink(missing_ok=True)
        server.close()
    print(f"[warm] pid {os.getpid()} stopped", flush=True)
    return 0


def _report_exit(conn: socket.socket, status: int) -> None:
    """Tell the caller how its child ended, as a shell would (128 + signal when killed). A child that ended
    normally has already sent its code, which the caller took; this second line then goes unread."""
    _send(conn, {"exit": 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.waitstatus_to_exitcode(status)})
    conn.close()


def _send(conn: socket.socket, message: dict) -> None:
    """One JSON line to the caller; a caller that has gone away is not an error here."""
    try:
        conn.sendall((json.dumps(message) + "\n").encode())
    except OSError:
        pass


def _child(conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked child: take over the caller's terminal, folder and environment, run the command, report."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(line_buffering=True)  # the server's streams were a log file; these are the caller's
        sys.argv = ["tunekit", *request["argv"]]
        _send(conn, {"pid": os.getpid()})
        _watch_caller(conn)
        from tunekit.cli.verbs import dispatch

        code = dispatch(request["argv"])  # in this process: dispatch looks for a warm process only when asked
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the cold program would print this traceback too
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        from tunekit.cli.verbs import finish_process

        _send(conn, {"exit": code})
        finish_process()
        os._exit(code)


def _watch_caller(conn: socket.socket) -> None:
    """If the calling command goes away (killed, terminal closed), stop this child as SIGTERM would."""
    import threading

    def watch() -> None:
        try:
            while conn.recv(1):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="tunekit-warm-watch", daemon=True).start()


# ---------------------------------------------------------------------------------------------- verbs


def main(argv: list[str]) -> int:
    import argparse

    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(HELP)
        return 0
    ap = argparse.ArgumentParser(prog="tunekit warm", add_help=False)
    ap.add_argument("action", nargs="?", default="start", choices=["start", "stop", "status"])
    ap.add_argument("--idle-minutes", type=float, default=30.0)
    ap.add_argument("--foreground", action="store_true", help="serve in this process (logs to the terminal)")
    ap.add_argument("--all", action="store_true", help="stop: every warm process of this user, not only this environment's")
    args = ap.parse_args(argv)
    from tunekit.errors import TunekitError

    if not SUPPORTED:
        raise TunekitError("tunekit warm needs Linux (fork and Unix sockets); commands start cold here")
    log_folder().mkdir(parents=True, exist_ok=True, mode=0o700)
    if private_socket_folder(create=True) is None:
        raise TunekitError(f"{socket_folder()} is not a folder that only you can use (owner and mode 0700): "
                           f"remove it or set XDG_RUNTIME_DIR to a private folder")
    path = socket_path()
    if args.action == "status":
        return _status(path)
    if args.action == "stop":
        return _stop([p for p in socket_folder().glob("warm-*.sock") if args.all or p == path])
    if path.exists() and _alive(path):
        print(f"tunekit warm: already running (pid {_pid(path)}) for this environment")
        return 0
    path.unlink(missing_ok=True)  # left by a warm process that was killed
    path.with_suffix(".pid").unlink(missing_ok=True)
    if args.foreground:
        return serve(path, args.idle_minutes)
    return _start_background(path, args.idle_minutes)


def _start_background(path: Path, idle_minutes: float) -> int:
    import subprocess

    log = log_folder() / "warm.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tunekit.cli.main", "warm", "start", "--foreground",
                                 "--idle-minutes", str(idle_minutes)], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, env=dict(os.environ, TUNEKIT_WARM="0"))
    deadline = time.monotonic() + 300
    while not path.exists():
        if proc.poll() is not None:
            sys.stderr.write(f"error: the warm process exited ({proc.returncode}) before it was ready; see {log}\n")
            return 1
        if time.monotonic() > deadline:
            proc.terminate()
            sys.stderr.write(f"error: the warm process was not ready after 300 s; see {log}\n")
            return 1
        time.sleep(0.05)
    print(f"tunekit warm: ready (pid {proc.pid}); commands in this environment now start warm. "
          f"Stops after {idle_minutes:g} idle minutes or with `tunekit warm stop`.")
    return 0


def _pid(path: Path) -> int | None:
    try:
        return int(path.with_suffix(".pid").read_text())
    except (OSError, ValueError):
        return None


def _alive(path: Path) -> bool:
    pid = _pid(path)
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _status(path: Path) -> int:
    others = [p for p in socket_folder().glob("warm-*.sock") if p != path and _alive(p)]
    if path.exists() and _alive(path):
        print(f"warm: running (pid {_pid(path)}); commands in this environment start warm")
    else:
        print("warm: not running for this environment; commands start cold (`tunekit warm start`)")
    if others:
        print(f"  {len(others)} other warm process(es) for another tunekit source, interpreter or environment "
              f"(pids {', '.join(str(_pid(p)) for p in others)})")
    return 0


def _stop(sockets: list[Path]) -> int:
    """SIGTERM these warm processes and wait (up to 10 s) until they are gone.

    Commands already running in children of a warm process go on to their end.
    """
    waiting = []
    for sock in sockets:
        if _alive(sock):
            _kill(_pid(sock), signal.SIGTERM)
            waiting.append(sock)
        else:
            sock.unlink(missing_ok=True)
            sock.with_suffix(".pid").unlink(missing_ok=True)
    deadline = time.monotonic() + 10
    while any(s.exists() for s in waiting) and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"tunekit warm: stopped {len(waiting)} process(es)")
    return 0
