"""``tunekit webui [--host H] [--port P] [--share] [--auth user:password] [--lang en|zh]``."""

from __future__ import annotations

import argparse
import os
import sys

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tunekit webui",
        description="Serve the web board: every option, command preview, memory plan, training with live "
                    "loss, chat and export. Binds to loopback (127.0.0.1:7860) unless told otherwise.",
    )
    p.add_argument("--host", default=None, help="Address to bind (default: $GRADIO_SERVER_NAME or 127.0.0.1).")
    p.add_argument("--port", type=int, default=None, help="Port (default: $GRADIO_SERVER_PORT or 7860).")
    p.add_argument("--share", action="store_true", help="Open a public Gradio share link (off by default).")
    p.add_argument("--auth", default=None, metavar="USER:PASSWORD", help="Ask for this user name and password.")
    p.add_argument("--lang", choices=("en", "zh"), default="en", help="Initial language of the board.")
    return p


def resolve_bind(host: str | None, port: int | None, env=None) -> tuple[str, int]:
    env = os.environ if env is None else env
    host = host or env.get("GRADIO_SERVER_NAME") or "127.0.0.1"
    port = port or int(env.get("GRADIO_SERVER_PORT") or 7860)
    return host, port


def parse_auth(text: str | None) -> tuple[str, str] | None:
    from tunekit.errors import ConfigError

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
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    where = "loopback only: other machines cannot reach it" if host in LOOPBACK else "reachable from the network"
    print(f"tunekit webui: serving on http://{host}:{port} ({where})", flush=True)
    if host not in LOOPBACK and auth is None:
        print("warning: the board runs training jobs; consider --auth USER:PASSWORD when exposing it", file=sys.stderr)
    if args.share:
        print("tunekit webui: --share opens a public link through Gradio's share servers", flush=True)
    import signal

    # SIGTERM (a service manager, a test) exits like Ctrl-C, so the running job is stopped cleanly too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from tunekit.webui.app import launch

    launch(host, port, share=args.share, auth=auth, lang=args.lang)
    return 0
