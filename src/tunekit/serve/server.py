"""Run the API with uvicorn: host/port/key/model name/body limit from flags, else API_HOST/API_PORT/API_KEY/
API_MODEL_NAME/API_MAX_BODY_MB."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..config.problems import Said
from ..config.schema import Config
from ..errors import ConfigError
from ..infer.engine import ChatEngine
from .admission import default_body_bytes


@dataclass
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    model_name: str | None = None
    max_body_bytes: int | None = None  # None: admission.default_body_bytes (from the model's context)


def settings_from_env(**flags) -> ServeSettings:
    """Settings from the flags given (not None), else from the environment (each checked only when used)."""
    env = os.environ.get
    s = ServeSettings(
        host=env("API_HOST") or "127.0.0.1", api_key=env("API_KEY") or None, model_name=env("API_MODEL_NAME") or None
    )
    if flags.get("port") is None:
        s.port = port_number(env("API_PORT") or "8000", "API_PORT")
    if flags.get("max_body_bytes") is None:
        s.max_body_bytes = body_bytes(env("API_MAX_BODY_MB"), "API_MAX_BODY_MB")
    for key, value in flags.items():
        if value is not None:
            setattr(s, key, value)
    return s


def port_number(text: str, where: str) -> int:
    """A TCP port (1-65535) from ``--port`` / ``API_PORT``; anything else is a named error."""
    text = str(text).strip()
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ConfigError(Said("serve_bad_port", where=where, value=repr(text)))
    return int(text)


def body_bytes(megabytes: str | None, where: str) -> int | None:
    """The request body limit in bytes from a number of MB (``--max-body-mb`` / ``API_MAX_BODY_MB``); None: unset."""
    if not megabytes:
        return None
    try:
        value = float(megabytes)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ConfigError(Said("serve_bad_body_mb", where=where, value=repr(megabytes)))
    return max(1, int(value * 1e6))


def default_model_name(cfg: Config) -> str:
    adapters = cfg.adapter_paths
    return Path(adapters[-1] if adapters else cfg.model_name_or_path).name or "tunekit"


def serve(cfg: Config, settings: ServeSettings) -> None:
    """Load the model and serve it until SIGINT/SIGTERM; a stop signal cancels the running generations first, so
    the process ends within a few seconds even mid-generation."""
    import uvicorn

    from .app import Limits, create_app  # FastAPI: imported only to serve

    engine = ChatEngine(cfg)
    name = settings.model_name or default_model_name(cfg)
    limits = Limits.from_config(cfg)
    body = settings.max_body_bytes or default_body_bytes(engine.context_length)
    body = body if engine.mm is None else limits.media.body_bytes(body)
    app = create_app(engine, name, api_key=settings.api_key, max_body_bytes=body, limits=limits)
    if engine.mm is not None:
        folder = limits.media.folder
        files = f"files under {folder}" if folder else "no local files (api_media_dir is unset)"
        print(
            f"media: {', '.join(engine.mm.MEDIA)} as base64 data: URLs up to {limits.media.max_bytes / 1e6:g} MB each "
            f"(api_max_media_mb); {files}",
            flush=True,
        )
    print(
        f"serving '{name}' on http://{settings.host}:{settings.port}/v1 (OpenAI-compatible; "
        f"{'API key required' if settings.api_key else 'no API key'}; request bodies up to {body / 1e6:g} MB); "
        f"Ctrl+C stops",
        flush=True,
    )
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="info", timeout_graceful_shutdown=5)
    StoppingServer(config, app.state.stop_generations).run()


def _stopping_server_class():
    import uvicorn

    class _StoppingServer(uvicorn.Server):
        """uvicorn's server whose stop signal first cancels the app's in-flight generations (uvicorn alone waits for
        every open response to finish, and a long generation never would)."""

        def __init__(self, config, on_stop):
            super().__init__(config)
            self._on_stop = on_stop

        def handle_exit(self, sig, frame) -> None:
            self._on_stop()
            super().handle_exit(sig, frame)

    return _StoppingServer


def StoppingServer(config, on_stop):  # noqa: N802 (a class, built on first use: uvicorn is imported only to serve)
    return _stopping_server_class()(config, on_stop)
