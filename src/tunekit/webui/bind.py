"""Where the board listens, checked before Gradio is imported: a taken port, an exposed board without a password.

No Gradio and no torch here: ``tunekit webui`` refuses a bad address in milliseconds, with one line.
"""

from __future__ import annotations

import errno
import socket

from tunekit.errors import ConfigError, EnvironmentProblem

LOOPBACK = ("127.0.0.1", "localhost", "::1")
ACCEPT_NO_AUTH_FLAG = "--i-understand-no-auth"


def port_taken_message(host: str, port: int) -> str:
    return (
        f"port {port} on {host} is already in use (another board or server?): "
        f"choose a free one with --port {port + 1} or GRADIO_SERVER_PORT={port + 1}."
    )


def check_port(host: str, port: int) -> None:
    """EnvironmentProblem when ``host:port`` cannot be bound (the same test Gradio makes, with SO_REUSEADDR)."""
    if not 0 < port < 65536:
        raise ConfigError(f"--port {port} is not a TCP port (1-65535).")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(f"--host {host!r} is not an address of this machine ({exc.strerror}).") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise EnvironmentProblem(port_taken_message(host, port)) from None
            if exc.errno == errno.EACCES:
                raise EnvironmentProblem(
                    f"port {port} on {host} needs privileges to bind: use --port 7860 (or any port above 1023)."
                ) from None
            raise EnvironmentProblem(
                f"cannot listen on {host}:{port}: {exc.strerror}: pass another --host or --port."
            ) from None


def check_exposure(host: str, share: bool, auth, accepted: bool) -> None:
    """Refuse a board reachable from other machines (a non-loopback address, or --share) without --auth."""
    exposed = host not in LOOPBACK or share
    if exposed and auth is None and not accepted:
        where = "a public share link" if share else f"{host}, which other machines can reach"
        raise ConfigError(
            f"refusing to serve the board on {where} without a password: anyone who reaches it can start "
            f"jobs. Pass --auth USER:PASSWORD, bind to 127.0.0.1, or pass {ACCEPT_NO_AUTH_FLAG} to accept it."
        )


def check_trusted_proxies(values) -> list[str]:
    """The ``--trusted-proxy`` addresses (IPs or networks) as given; ConfigError for one that is neither.

    Only a connection from one of them may name the client it forwards (``X-Forwarded-For``): the login
    limit then counts that client. With none, every client is counted by its connection's address."""
    import ipaddress

    out = []
    for value in values or ():
        text = str(value).strip()
        try:
            ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise ConfigError(
                f"--trusted-proxy {value!r} is not an IP address or network: give the reverse proxy's "
                f"address, e.g. --trusted-proxy 127.0.0.1 or 10.0.0.0/24."
            ) from None
        out.append(text)
    return out
