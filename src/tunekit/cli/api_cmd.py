"""``tunekit api CONFIG.yaml [key=value ...] [--host H] [--port P] [--api-key K] [--model-name NAME]
[--max-body-mb MB]``."""

from __future__ import annotations

import socket
import sys

from tunekit.errors import ConfigError
from tunekit.serve.server import body_bytes, port_number, serve, settings_from_env

from .args import config_and_flags

HELP = """usage: tunekit api [CONFIG.yaml] [key=value ...] [--host H] [--port P] [--api-key KEY] [--model-name NAME]
                  [--max-body-mb MB]

Serve the model behind an OpenAI-compatible API: GET /v1/models, POST /v1/chat/completions (streaming
and not, n, max_tokens, temperature, top_p, stop, usage, tools for templates with a tool format).

  --host        address to listen on  [env API_HOST, default 127.0.0.1]
  --port        port, 1-65535         [env API_PORT, default 8000]
  --api-key     require 'Authorization: Bearer KEY' (401 otherwise)  [env API_KEY]
  --model-name  the model id clients send [env API_MODEL_NAME, default: the model/adapter folder name]
  --max-body-mb larger request bodies are refused (413) before they are read whole [env API_MAX_BODY_MB,
                default: 32 bytes per context token, at least 1 MB; a media model adds one media item]

Requests never block each other: 1 + api_max_queue requests are served at once and their generations take
turns on the model every few tokens (a long reply or many choices only slow the others down; a vision-language
model serves one request at a time). Limits (ordinary
options, e.g. api_max_tokens=1024): api_max_tokens (4096; also prompt + max_tokens must fit the context),
api_queue_timeout (30 s waiting for a place when all are taken, then 429 + Retry-After), api_max_queue (16),
api_stream_timeout (30 s for a client to read a chunk), api_parse_special_tokens (false: control-token text in
messages stays text), generation_seed (unset: sampled replies are random unless the request sets seed).
A vision-language / audio model takes image_url, video_url, input_audio parts: base64 data: URLs up to
api_max_media_mb (20) MB each; files only under api_media_dir (unset: none); http(s) URLs are refused.
A disconnected client's generation stops; SIGTERM/Ctrl+C cancels running generations and exits.
infer_backend: vllm is not served by tunekit: export the model and run `vllm serve EXPORT_DIR`.
"""

FLAGS = ("--host", "--port", "--api-key", "--model-name", "--max-body-mb")


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(HELP)
        return 0
    flags, cfg = config_and_flags(argv, FLAGS)
    port = flags.get("--port")
    settings = settings_from_env(
        host=flags.get("--host"),
        port=port_number(port, "--port") if port is not None else None,
        api_key=flags.get("--api-key"),
        model_name=flags.get("--model-name"),
        max_body_bytes=body_bytes(flags.get("--max-body-mb"), "--max-body-mb"),
    )
    check_listen_address(settings.host, settings.port, "--host" if flags.get("--host") else "API_HOST")
    serve(cfg, settings)
    return 0


def check_listen_address(host: str, port: int, where: str) -> None:
    """Bind ``host:port`` once before the model loads: a name that does not resolve, an address not on this machine
    or a port in use is a named error now, not a server that starts, logs the OS error and exits after the load."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(
            f"{where} {host!r} is not an address this machine can listen on ({exc.strerror}): use an IP "
            f"address or host name such as 127.0.0.1 (this machine only) or 0.0.0.0 (every network)."
        ) from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a TIME_WAIT port is free
        try:
            sock.bind(address)
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {host}:{port} ({exc.strerror or exc}): choose a free port with --port "
                f"(or API_PORT), or another --host."
            ) from None
