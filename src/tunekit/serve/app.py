"""The FastAPI app: ``GET /v1/models``, ``POST /v1/chat/completions`` (streaming SSE and not).

Errors are OpenAI-shaped ``{"error": {"message", "type", "param", "code"}}``, on every route and for every
failure: 401 missing/wrong bearer key (every route, ``/openapi.json`` too; the ``Bearer`` scheme in any case,
the key compared in constant time), 400 malformed JSON (also: nested deeper than ``MAX_DEPTH``, NaN/Infinity,
lone UTF-16 surrogates in a string) or an unusable conversation (empty, wrong role order, media the model cannot
read or that cannot be decoded (:mod:`tunekit.serve.media`), options the template cannot honour, a prompt that does
not fit the model's context, ``max_tokens`` above ``api_max_tokens`` or the room the context leaves), 404 unknown model
or route, 413 body larger than ``max_body_bytes`` or a media item larger than ``api_max_media_mb``, 422 a body that
does not match the request schema (wrong types, out-of-range integers, ``"stream": "yes"``, ...), 429 (with
``Retry-After``) when the server stays busy, 503 while the server stops, 500 (still JSON) for a bug.

Concurrency (:mod:`tunekit.serve.admission`): ``1 + api_max_queue`` requests are served at once and their
generations take turns on the model every few tokens (:mod:`tunekit.infer.turns`), so no request (a long reply,
``n`` choices, a huge prompt, a client that stops reading) holds the model while others wait, and outputs never
mix (a vision-language model, whose generations cannot interleave, serves one request at a time). A request that
finds every place taken waits for one at most ``api_queue_timeout`` seconds and at most ``api_max_queue``
requests wait; otherwise 429. Bodies are refused by size before they are parsed, text that cannot fit the context
before it is tokenized; bodies are parsed and prompts tokenized in worker threads, never on the event loop. A
generation stops at its next token when its client disconnects (streaming or not), when a streamed chunk waits
longer than ``api_stream_timeout`` for the client to read it, or when the server is stopped (SIGTERM/SIGINT:
:func:`stop_generations`).

Request text is encoded with special-token parsing off unless ``api_parse_special_tokens`` (see
:mod:`tunekit.infer.untrusted`). The request becomes a conversation in :mod:`tunekit.serve.conversation`, the
finished generations a response in :mod:`tunekit.serve.replies`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import FastAPI, Request  # module level: FastAPI resolves the string annotations of the endpoints here
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from ..config.schema import Config
from ..errors import TunekitError
from ..infer.engine import choice_seed
from ..infer.reasoning import has_thought_markers
from .admission import Places, check_prompt_size, default_body_bytes, render_prompt
from .conversation import generation_args, to_conversation
from .media import MediaPolicy
from .protocol import MAX_DEPTH, ChatCompletionRequest
from .replies import SHUTTING_DOWN, Reply, choice, completion, sse_events
from .request_checks import APIError, authorized, parse_json
from .streaming import GuardedStream, drain_watching


@dataclass
class Limits:
    """The server's limits (the ``api_*`` options of the config; see ``docs/after-training.md``)."""

    max_tokens: int = 4096
    queue_timeout: float = 30.0
    max_queue: int = 16
    stream_timeout: float = 30.0
    parse_special_tokens: bool = False
    media: MediaPolicy = MediaPolicy()

    @classmethod
    def from_config(cls, cfg: Config) -> Limits:
        return cls(
            max_tokens=cfg.api_max_tokens,
            queue_timeout=cfg.api_queue_timeout,
            max_queue=cfg.api_max_queue,
            stream_timeout=cfg.api_stream_timeout,
            parse_special_tokens=cfg.api_parse_special_tokens,
            media=MediaPolicy.from_config(cfg),
        )


@dataclass
class _Served:
    """What the routes share: the engine, the model's name, the limits, the places and what is in flight."""

    engine: Any
    model_name: str
    limits: Limits
    slot: Places
    created: int
    tool_format: Any
    inflight: set
    state: dict


def create_app(
    engine,
    model_name: str,
    api_key: str | None = None,
    max_body_bytes: int | None = None,
    limits: Limits | None = None,
):
    limits = limits or Limits.from_config(engine.cfg)
    if max_body_bytes is None:
        max_body_bytes = default_body_bytes(engine.context_length)
    app = FastAPI(title="tunekit OpenAI-compatible API", docs_url=None, redoc_url=None)
    places = Places(limits, interleaved=getattr(engine, "interleaves", True))
    served = _Served(
        engine=engine,
        model_name=model_name,
        limits=limits,
        slot=places,
        created=int(time.time()),
        tool_format=getattr(engine.template, "tool_format", None),
        inflight=set(),
        state={"stopping": False},
    )

    def stop_generations() -> None:
        """Cancel every running generation and refuse new ones (the server is stopping); safe in a signal handler."""
        served.state["stopping"] = True
        for g in list(served.inflight):
            g.cancel()

    app.state.stop_generations = stop_generations
    app.state.inflight = served.inflight
    _install_error_handlers(app)
    app.add_middleware(_auth_middleware(api_key))
    _install_model_routes(app, served)
    _install_chat_route(app, served, max_body_bytes)
    return app


def _install_error_handlers(app) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return exc.response(getattr(exc, "headers", None))

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException):
        code = "not_found" if exc.status_code == 404 else None
        return APIError(exc.status_code, str(exc.detail), code=code).response()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        return APIError(422, _describe(exc.errors())).response()

    @app.exception_handler(Exception)
    async def _server_error(request: Request, exc: Exception):
        return APIError(
            500,
            f"Internal server error ({type(exc).__name__}); the server log has the details.",
            type_="server_error",
            code="internal_error",
        ).response()


def _auth_middleware(api_key: str | None):
    class _Auth:
        """Every route needs the key (``/openapi.json`` as much as ``/v1/models``)."""

        def __init__(self, app_):
            self.app = app_

        async def __call__(self, scope, receive, send):
            if scope["type"] == "http" and api_key is not None:
                header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
                if not authorized(header, api_key):
                    err = APIError(
                        401,
                        "Incorrect or missing API key: send 'Authorization: Bearer <API_KEY>'.",
                        type_="authentication_error",
                        code="invalid_api_key",
                    )
                    await err.response()(scope, receive, send)
                    return
            await self.app(scope, receive, send)

    return _Auth


def _unknown_model(model_id: str, model_name: str) -> APIError:
    return APIError(
        404,
        f"The model '{model_id}' does not exist; this server serves '{model_name}'.",
        param="model",
        code="model_not_found",
    )


def _install_model_routes(app, served: _Served) -> None:
    model_name = served.model_name

    def model_card() -> dict:
        return {"id": model_name, "object": "model", "created": served.created, "owned_by": "tunekit"}

    @app.get("/v1/models")
    async def list_models(request: Request):
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str, request: Request):
        if model_id != model_name:
            raise _unknown_model(model_id, model_name)
        return model_card()


# ------------------------------------------------------------------------------------ a chat request
async def _read_request(request: Request, max_body_bytes: int, note: str = "") -> ChatCompletionRequest:
    """The body, refused by size before it is read whole (413), then parsed and checked in a worker thread."""
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > max_body_bytes:
        raise APIError(
            413,
            f"Request body of {int(length):,} bytes is larger than the limit of {max_body_bytes:,} bytes"
            f"{note}; send less, or start the server with a larger --max-body-mb.",
            code="request_too_large",
        )
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_body_bytes:
            raise APIError(
                413,
                f"Request body is larger than the limit of {max_body_bytes:,} bytes{note}; send less, or start "
                f"the server with a larger --max-body-mb.",
                code="request_too_large",
            )
    return await anyio.to_thread.run_sync(_parse_request, bytes(body))


def _parse_request(body: bytes) -> ChatCompletionRequest:
    data = parse_json(body)
    if not isinstance(data, dict):
        raise APIError(400, "The body must be a JSON object.")
    try:
        return ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        raise APIError(422, _describe(exc.errors()), param=_first_loc(exc.errors())) from None
    except RecursionError:  # MAX_DEPTH keeps this from happening; never a plain 500
        raise APIError(400, f"The body is nested too deeply (more than {MAX_DEPTH} levels).") from None


def _media_note(engine, limits: Limits) -> str:
    """What a 413 adds for a model that reads media: base64 media count in the body."""
    if getattr(engine, "mm", None) is None:
        return ""
    return (
        f" (base64 media count in it: each image, video or audio may be up to {limits.media.max_bytes / 1e6:g} MB "
        f"decoded, option api_max_media_mb)"
    )


def _budget(engine, limits: Limits, prompt_tokens: int, requested: int | None) -> int:
    """max_new_tokens for this request: requested (checked) or the configured default, within the context."""
    ctx = engine.context_length
    if ctx is not None and prompt_tokens >= ctx:
        raise APIError(
            400,
            f"The prompt is {prompt_tokens} tokens but the model's context is {ctx} tokens: shorten the messages.",
            param="messages",
            code="context_length_exceeded",
        )
    room = ctx - prompt_tokens if ctx is not None else None
    if requested is not None:
        if requested > limits.max_tokens:
            raise APIError(
                400,
                f"max_tokens {requested} is larger than this server's limit of {limits.max_tokens} "
                f"(option api_max_tokens).",
                param="max_tokens",
            )
        if room is not None and requested > room:
            raise APIError(
                400,
                f"The prompt ({prompt_tokens} tokens) plus max_tokens ({requested}) exceeds the model's "
                f"context of {ctx} tokens: ask for at most {room}.",
                param="max_tokens",
                code="context_length_exceeded",
            )
        return requested
    return min(int(engine.cfg.max_new_tokens), limits.max_tokens, *([room] if room is not None else []))


def _shutting_down(what: str = "The server is shutting down.") -> APIError:
    return APIError(503, what, type_="server_error", code="shutting_down")


async def _start_generations(
    served: _Served, req: ChatCompletionRequest, turns: list[dict], system: str | None, tools: Any
) -> list:
    """Take a place, then render the prompt and start the request's ``n`` generations: option and context mistakes
    are 400s before any streaming starts (the place given back). Tokenizing (and media decoding) is CPU work: in a
    worker thread, inside the request's place."""
    engine, limits = served.engine, served.limits
    gen = generation_args(req)
    base_seed = req.seed if req.seed is not None else engine.cfg.generation_seed
    check_prompt_size(engine, turns, system)  # before any tokenizing, and before a place is taken
    await served.slot.acquire()
    try:
        ids, media = await anyio.to_thread.run_sync(render_prompt, engine, limits, turns, system, tools)
        gen["max_new_tokens"] = _budget(engine, limits, len(ids), gen["max_new_tokens"])
        return [engine.start_ids(ids, media, **{**gen, "seed": choice_seed(base_seed, i)}) for i in range(req.n)]
    except TunekitError as exc:
        served.slot.release()
        raise APIError(400, str(exc), param="messages") from None
    except BaseException:
        served.slot.release()
        raise


def _finisher(served: _Served, generations: list) -> Callable[[], None]:
    """``finish()``: cancel the generations and give the place back, once, however often it is called."""
    released = False

    def finish() -> None:
        nonlocal released
        if not released:
            released = True
            for g in generations:
                g.cancel()
                served.inflight.discard(g)
            served.slot.release()

    return finish


async def _choices(served: _Served, request: Request, generations: list, reply: Reply) -> list[dict] | None:
    """The generations run to their ends one after another, watching the client; None when the client is gone."""
    choices = []
    for i, g in enumerate(generations):
        await drain_watching(g, request)
        if await request.is_disconnected():
            return None
        if served.state["stopping"]:
            raise _shutting_down(SHUTTING_DOWN)
        choices.append(choice(i, g, reply))
    return choices


def _install_chat_route(app, served: _Served, max_body_bytes: int) -> None:
    note = _media_note(served.engine, served.limits)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        if served.state["stopping"]:
            raise _shutting_down()
        req = await _read_request(request, max_body_bytes, note)
        if req.model != served.model_name:
            raise _unknown_model(req.model, served.model_name)
        turns, system = to_conversation(req.messages)
        tools = req.tools if req.tools and req.tool_choice != "none" else None
        generations = await _start_generations(served, req, turns, system, tools)
        served.inflight.update(generations)
        finish = _finisher(served, generations)
        if served.state["stopping"]:
            finish()
            raise _shutting_down()
        reply = Reply(
            f"chatcmpl-{uuid.uuid4().hex}",
            int(time.time()),
            served.model_name,
            served.tool_format,
            bool(tools),
            has_thought_markers(served.engine.template),
        )
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return GuardedStream(
                sse_events(reply, generations, include_usage, served.state),
                finish,
                served.limits.stream_timeout,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        try:
            choices = await _choices(served, request, generations, reply)
        finally:
            finish()
        if choices is None:
            return JSONResponse({}, status_code=499)  # nobody reads it
        return JSONResponse(completion(reply, choices, generations))


# ------------------------------------------------------------------------------------ validation messages
def _first_loc(errors: list[dict]) -> str | None:
    for err in errors:
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        if loc:
            return ".".join(loc)
    return None


def _describe(errors: list[dict]) -> str:
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "Invalid request: " + "; ".join(parts) + "."
