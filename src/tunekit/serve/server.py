"""Run the API with uvicorn: host/port/key/model name from flags, else API_HOST/API_PORT/API_KEY/API_MODEL_NAME."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    model_name: str | None = None
    max_body_bytes: int = 4 * 2**20


def settings_from_env(**flags) -> ServeSettings:
    s = ServeSettings(
        host=os.environ.get("API_HOST") or "127.0.0.1",
        port=int(os.environ.get("API_PORT") or 8000),
        api_key=os.environ.get("API_KEY") or None,
        model_name=os.environ.get("API_MODEL_NAME") or None,
    )
    for key, value in flags.items():
        if value is not None:
            setattr(s, key, value)
    return s


def default_model_name(cfg) -> str:
    adapters = cfg.adapter_paths
    return Path(adapters[-1] if adapters else cfg.model_name_or_path).name or "tunekit"


def serve(cfg, settings: ServeSettings) -> None:
    """Load the model and serve it until SIGINT/SIGTERM; a stop signal cancels the running generations first, so
    the process ends within a few seconds even mid-generation."""
    import uvicorn

    from ..infer.engine import ChatEngine
    from .app import Limits, create_app

    engine = ChatEngine(cfg)
    name = settings.model_name or default_model_name(cfg)
    limits = Limits.from_config(cfg)
    body = settings.max_body_bytes if engine.mm is None else limits.media.body_bytes(settings.max_body_bytes)
    app = create_app(engine, name, api_key=settings.api_key, max_body_bytes=body, limits=limits)
    if engine.mm is not None:
        folder = limits.media.folder
        files = f"files under {folder}" if folder else "no local files (api_media_dir is unset)"
        print(f"media: {', '.join(engine.mm.MEDIA)} as base64 data: URLs up to {limits.media.max_bytes / 1e6:g} MB each "
              f"(api_max_media_mb); {files}", flush=True)
    print(f"serving '{name}' on http://{settings.host}:{settings.port}/v1 (OpenAI-compatible; "
          f"{'API key required' if settings.api_key else 'no API key'}); Ctrl+C stops", flush=True)
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
