"""The FastAPI app: ``GET /v1/models``, ``POST /v1/chat/completions`` (streaming SSE and not).

Errors are OpenAI-shaped ``{"error": {"message", "type", "param", "code"}}``, on every route and for every
failure: 401 missing/wrong bearer key (every route, ``/openapi.json`` too; the ``Bearer`` scheme in any case,
the key compared in constant time), 400 malformed JSON (also: nested deeper than ``MAX_DEPTH``, NaN/Infinity,
lone UTF-16 surrogates in a string) or an unusable conversation (empty, wrong role order, media the model cannot
read or that cannot be decoded (:mod:`tunekit.serve.media`), options the template cannot honour, a prompt that does not fit the model's context, ``max_tokens`` above
``api_max_tokens`` or the room the context leaves), 404 unknown model or route, 413 body larger than
``max_body_bytes`` or a media item larger than ``api_max_media_mb``, 422 a body that does not match the request schema (wrong types, out-of-range integers,
``"stream": "yes"``, ...), 429 (with ``Retry-After``) when the server stays busy, 503 while the server
stops, 500 (still JSON) for a bug.

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
:mod:`tunekit.infer.untrusted`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import Request  # module level: FastAPI resolves the string annotations of the endpoints here

from ..errors import TunekitError
from ..infer.engine import choice_seed
from .admission import Places, check_prompt_size, default_body_bytes, render_prompt
from .media import MediaPolicy, is_media_part, media_source
from .protocol import MAX_DEPTH, ChatCompletionRequest, ChatMessage
from .request_checks import APIError, authorized, parse_json
from .streaming import GuardedStream, drain, drain_watching
from .toolcalls import extract_tool_calls


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
    def from_config(cls, cfg) -> Limits:
        return cls(
            max_tokens=cfg.api_max_tokens,
            queue_timeout=cfg.api_queue_timeout,
            max_queue=cfg.api_max_queue,
            stream_timeout=cfg.api_stream_timeout,
            parse_special_tokens=cfg.api_parse_special_tokens,
            media=MediaPolicy.from_config(cfg),
        )


# ------------------------------------------------------------------------------------ request -> engine
def _text(msg: ChatMessage, i: int, media: bool = False) -> str | list:
    """A message's text; with ``media`` (user messages) a list of text and media parts when it has media parts."""
    if msg.content is None:
        return ""
    if isinstance(msg.content, str):
        return msg.content
    parts: list = []
    for j, part in enumerate(msg.content):
        if media and is_media_part(part.type):
            parts.append(media_source(part, f"messages[{i}].content[{j}]"))
        elif part.type != "text" or part.text is None:
            where = "user messages only" if is_media_part(part.type) else "text, image_url, video_url, input_audio"
            raise APIError(
                400,
                f"messages[{i}]: content part of type '{part.type}' is not supported here ({where}; "
                f"a text part needs 'text').",
                param=f"messages.{i}.content",
            )
        else:
            parts.append(part.text)
    return parts if any(not isinstance(p, str) for p in parts) else "".join(parts)


def to_conversation(messages: list[ChatMessage]) -> tuple[list[dict], str | None]:
    """OpenAI messages -> tunekit's (user|observation, assistant|function_call) turns and the system text."""
    if not messages:
        raise APIError(400, "messages must not be empty: send at least one user message.", param="messages")
    system: list[str] = []
    turns: list[dict] = []
    for i, msg in enumerate(messages):
        if msg.role in ("system", "developer"):
            if turns:
                raise APIError(
                    400, f"messages[{i}]: a {msg.role} message must come before the conversation.", param="messages"
                )
            system.append(_text(msg, i))
        elif msg.role == "user":
            turns.append({"role": "user", "content": _text(msg, i, media=True)})
        elif msg.role == "assistant" and msg.tool_calls:
            calls = []
            for call in msg.tool_calls:
                try:
                    args = json.loads(call.function.arguments or "{}")
                except json.JSONDecodeError:
                    raise APIError(
                        400,
                        f"messages[{i}]: tool call arguments are not valid JSON.",
                        param=f"messages.{i}.tool_calls",
                    ) from None
                calls.append({"name": call.function.name, "arguments": args})
            turns.append({"role": "function_call", "content": json.dumps(calls, ensure_ascii=False)})
        elif msg.role == "assistant":
            turns.append({"role": "assistant", "content": _text(msg, i)})
        else:  # tool / function results; consecutive results form one observation
            if turns and turns[-1]["role"] == "observation":
                turns[-1]["content"] += "\n" + _text(msg, i)
            else:
                turns.append({"role": "observation", "content": _text(msg, i)})
    if not turns:
        raise APIError(400, "messages hold only system text: add a user message.", param="messages")
    if turns[-1]["role"] not in ("user", "observation"):
        raise APIError(
            400, "the last message must be a user or tool message (the model answers it).", param="messages"
        )
    return turns, "\n".join(system) or None


def generation_args(req: ChatCompletionRequest) -> dict[str, Any]:
    gen: dict[str, Any] = {
        "max_new_tokens": req.max_completion_tokens or req.max_tokens,
        "top_p": req.top_p,
        "stop": req.stop,
        "seed": req.seed,
    }
    if req.temperature is not None:
        gen["temperature"] = req.temperature
        gen["do_sample"] = req.temperature > 0
    return gen


def _tool_calls(calls: list[tuple[str, str]]) -> list[dict]:
    return [
        {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": n, "arguments": a}}
        for n, a in calls
    ]


# ------------------------------------------------------------------------------------ the app
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
    from fastapi import FastAPI

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
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

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
            raise APIError(
                404,
                f"The model '{model_id}' does not exist; this server serves '{model_name}'.",
                param="model",
                code="model_not_found",
            )
        return model_card()


async def _read_request(request: Request, max_body_bytes: int, note: str = "") -> ChatCompletionRequest:
    """The body, refused by size before it is read whole (413), then parsed and checked in a worker thread."""
    import anyio

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
    from pydantic import ValidationError

    data = parse_json(body)
    if not isinstance(data, dict):
        raise APIError(400, "The body must be a JSON object.")
    try:
        return ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        raise APIError(422, _describe(exc.errors()), param=_first_loc(exc.errors())) from None
    except RecursionError:  # MAX_DEPTH keeps this from happening; never a plain 500
        raise APIError(400, f"The body is nested too deeply (more than {MAX_DEPTH} levels).") from None


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


def _install_chat_route(app, served: _Served, max_body_bytes: int) -> None:
    from fastapi.responses import JSONResponse

    engine, model_name, limits, state = served.engine, served.model_name, served.limits, served.state
    note = (
        ""
        if getattr(engine, "mm", None) is None
        else (
            f" (base64 media count in it: each image, video or audio may be up to {limits.media.max_bytes / 1e6:g} MB "
            f"decoded, option api_max_media_mb)"
        )
    )

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        import anyio

        if state["stopping"]:
            raise _shutting_down()
        req = await _read_request(request, max_body_bytes, note)
        if req.model != model_name:
            raise APIError(
                404,
                f"The model '{req.model}' does not exist; this server serves '{model_name}'.",
                param="model",
                code="model_not_found",
            )
        turns, system = to_conversation(req.messages)
        tools = req.tools if req.tools and req.tool_choice != "none" else None
        gen = generation_args(req)
        base_seed = req.seed if req.seed is not None else engine.cfg.generation_seed
        check_prompt_size(engine, turns, system)  # before any tokenizing, and before a place is taken
        await served.slot.acquire()
        try:  # render + option checks now, so mistakes are 400s before any streaming starts; tokenizing (and media
            # decoding) is CPU work: in a worker thread, inside the request's place
            ids, media = await anyio.to_thread.run_sync(render_prompt, engine, limits, turns, system, tools)
            gen["max_new_tokens"] = _budget(engine, limits, len(ids), gen["max_new_tokens"])
            generations = [
                engine.start_ids(ids, media, **{**gen, "seed": choice_seed(base_seed, i)}) for i in range(req.n)
            ]
        except TunekitError as exc:
            served.slot.release()
            raise APIError(400, str(exc), param="messages") from None
        except BaseException:
            served.slot.release()
            raise
        served.inflight.update(generations)
        released = False

        def finish() -> None:
            nonlocal released
            if not released:
                released = True
                for g in generations:
                    g.cancel()
                    served.inflight.discard(g)
                served.slot.release()

        if state["stopping"]:
            finish()
            raise _shutting_down()
        rid, now = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return GuardedStream(
                _sse(served, generations, rid, now, bool(tools), include_usage),
                finish,
                limits.stream_timeout,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        try:
            choices = []
            for i, g in enumerate(generations):
                await drain_watching(g, request)
                if await request.is_disconnected():
                    return JSONResponse({}, status_code=499)  # nobody reads it
                if state["stopping"]:
                    raise _shutting_down("The server is shutting down; the generation was stopped.")
                choices.append(
                    {
                        "index": i,
                        "message": _message(g, bool(tools), served.tool_format),
                        "finish_reason": _finish(g, bool(tools), served.tool_format),
                        "logprobs": None,
                    }
                )
        finally:
            finish()
        return JSONResponse(
            {
                "id": rid,
                "object": "chat.completion",
                "created": now,
                "model": model_name,
                "choices": choices,
                "usage": _usage(generations),
            }
        )


def _message(g, with_tools: bool, tool_format) -> dict:
    content, calls = extract_tool_calls(g.text, tool_format) if with_tools else (g.text, [])
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = _tool_calls(calls)
    return msg


def _finish(g, with_tools: bool, tool_format) -> str:
    if with_tools and extract_tool_calls(g.text, tool_format)[1]:
        return "tool_calls"
    return g.finish_reason


async def _sse(
    served: _Served, generations, rid: str, now: int, with_tools: bool, include_usage: bool
) -> AsyncIterator[str]:
    import anyio

    def chunk(choices: list, usage: dict | None = None) -> str:
        body = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": now,
            "model": served.model_name,
            "choices": choices,
        }
        if include_usage:
            body["usage"] = usage
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    for i, g in enumerate(generations):
        yield chunk(
            [{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None, "logprobs": None}]
        )
        if with_tools:  # calls are known only at the end: send the whole reply as one delta
            try:
                await anyio.to_thread.run_sync(drain, g, abandon_on_cancel=True)
            finally:  # client gone: the worker thread stops at its next token
                g.cancel()
            msg = _message(g, True, served.tool_format)
            delta = (
                {"content": msg["content"]}
                if "tool_calls" not in msg
                else {"tool_calls": [{"index": k, **c} for k, c in enumerate(msg["tool_calls"])]}
            )
            yield chunk([{"index": i, "delta": delta, "finish_reason": None, "logprobs": None}])
        else:
            iterator = iter(g)
            try:
                while True:
                    delta = await anyio.to_thread.run_sync(next, iterator, None)
                    if delta is None:
                        break
                    yield chunk([{"index": i, "delta": {"content": delta}, "finish_reason": None, "logprobs": None}])
            finally:  # client gone or done: stop generating and release the engine's lock
                g.cancel()
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(iterator.close)
        if served.state["stopping"]:
            error = {
                "message": "The server is shutting down; the generation was stopped.",
                "type": "server_error",
                "param": None,
                "code": "shutting_down",
            }
            yield f"data: {json.dumps({'error': error})}\n\n"
            return
        yield chunk(
            [{"index": i, "delta": {}, "finish_reason": _finish(g, with_tools, served.tool_format), "logprobs": None}]
        )
    if include_usage:
        yield chunk([], _usage(generations))
    yield "data: [DONE]\n\n"


def _usage(generations) -> dict:
    prompt = sum(g.prompt_tokens for g in generations)
    completion = sum(g.completion_tokens for g in generations)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


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
