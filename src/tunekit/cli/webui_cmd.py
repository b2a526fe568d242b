"""``tunekit webui [--host H] [--port P] [--share] [--auth user:password] [--workspace DIR] [--allow-path DIR]
[--max-upload-mb MB] [--trusted-proxy IP]``."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from tunekit.errors import ConfigError
from tunekit.webui.bind import check_exposure, check_port, check_trusted_proxies
from tunekit.webui.paths import PathPolicy

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tunekit webui",
        description="Serve the web board: every option, command preview, memory plan, training with live "
        "loss, chat and export. Binds to loopback (127.0.0.1:7860) unless told otherwise. The board "
        "reads and writes only inside its workspace, the Hugging Face hub cache and each "
        "--allow-path (docs/webui.md, 'Security model').",
    )
    p.add_argument("--host", default=None, help="Address to bind (default: $GRADIO_SERVER_NAME or 127.0.0.1).")
    p.add_argument("--port", type=int, default=None, help="Port (default: $GRADIO_SERVER_PORT or 7860).")
    p.add_argument(
        "--share", action="store_true", help="Open a public Gradio share link (off by default; needs --auth)."
    )
    p.add_argument(
        "--auth",
        default=None,
        metavar="USER:PASSWORD",
        help="Ask for this user name and password (5 wrong passwords a minute from one address, then 429).",
    )
    p.add_argument(
        "--i-understand-no-auth",
        dest="accept_no_auth",
        action="store_true",
        help="Serve on a non-loopback address (or --share) without --auth: anyone who reaches the "
        "board can start jobs. Refused without this flag.",
    )
    p.add_argument(
        "--workspace",
        default=None,
        metavar="DIR",
        help="The folder the board works in: jobs run there, relative paths resolve there, configs "
        "are saved only there (default: the current folder).",
    )
    p.add_argument(
        "--allow-path",
        action="append",
        default=[],
        metavar="DIR",
        help="Also let the board read and write under DIR (models, data elsewhere); repeatable.",
    )
    p.add_argument(
        "--allow-remote-code",
        action="store_true",
        help="Let the form set trust_remote_code and reward_funcs (they run code named in the form).",
    )
    p.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="IP",
        help="A reverse proxy (IP or network) whose X-Forwarded-For names the client the login limit "
        "counts; repeatable. Without it, clients are counted by their connection's address.",
    )
    p.add_argument("--lang", choices=("en", "zh"), default="en", help="Initial language of the board.")
    p.add_argument(
        "--max-upload-mb",
        type=float,
        default=20.0,
        metavar="MB",
        help="The largest file the board accepts as an upload (the Chat tab's images), in MB (default: 20).",
    )
    return p


def resolve_bind(host: str | None, port: int | None, env=None) -> tuple[str, int]:
    env = os.environ if env is None else env
    host = host or env.get("GRADIO_SERVER_NAME") or "127.0.0.1"
    port = port or int(env.get("GRADIO_SERVER_PORT") or 7860)
    return host, port


def parse_auth(text: str | None) -> tuple[str, str] | None:
    if not text:
        return None
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        raise ConfigError("--auth must be USER:PASSWORD (both non-empty), e.g. --auth admin:s3cret.")
    return user, password


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    host, port = resolve_bind(args.host, args.port)
    auth = parse_auth(args.auth)
    check_exposure(host, args.share, auth, args.accept_no_auth)
    proxies = check_trusted_proxies(args.trusted_proxy)
    workspace = os.path.abspath(os.path.expanduser(args.workspace or os.getcwd()))
    if not os.path.isdir(workspace):
        raise ConfigError(f"--workspace {workspace} is not a folder: create it or pass an existing one.")
    for extra in args.allow_path:
        if not os.path.isdir(os.path.expanduser(extra)):
            raise ConfigError(f"--allow-path {extra} is not a folder: pass an existing folder.")
    if not args.max_upload_mb > 0:
        raise ConfigError(f"--max-upload-mb must be above 0 (MB), got {args.max_upload_mb}: e.g. --max-upload-mb 20.")
    check_port(host, port)
    started_in = os.getcwd()
    os.chdir(workspace)  # the board's previews, its jobs and relative paths all resolve in the workspace
    # The board imports modules lazily: the working folder must not be where a module is found first.
    sys.path[:] = [p for p in sys.path if p not in ("", ".", started_in, workspace)]
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    where = "loopback only: other machines cannot reach it" if host in LOOPBACK else "reachable from the network"
    print(f"tunekit webui: serving on http://{host}:{port} ({where}); workspace {workspace}", flush=True)
    if host not in LOOPBACK and auth is None:
        print("warning: no --auth: anyone who reaches this address can start jobs on this machine", file=sys.stderr)
    if workspace == os.path.expanduser("~") or workspace == os.path.abspath(os.sep):
        print(
            f"warning: the workspace is {workspace}: every file below it that is not hidden can be previewed "
            f"from the board; start it in a project folder or pass --workspace DIR",
            file=sys.stderr,
        )
    if args.share:
        print("tunekit webui: --share opens a public link through Gradio's share servers", flush=True)
    # SIGTERM (a service manager, a test) exits like Ctrl-C, so the running job is stopped cleanly too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from tunekit.webui.app import launch  # Gradio and FastAPI: imported once the arguments are good, never for --help

    policy = PathPolicy(workspace, args.allow_path, allow_remote_code=args.allow_remote_code)
    launch(
        host,
        port,
        share=args.share,
        auth=auth,
        lang=args.lang,
        cwd=workspace,
        policy=policy,
        max_upload_bytes=int(args.max_upload_mb * 1_000_000),
        trusted_proxies=proxies,
    )
    return 0
