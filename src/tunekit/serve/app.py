"""The FastAPI app: ``GET /v1/models``, ``POST /v1/chat/completions`` (streaming SSE and not).

Errors are OpenAI-shaped ``{"error": {"message", "type", "param", "code"}}``:
401 missing/wrong bearer key, 400 malformed JSON or an unusable conversation (empty, wrong role order,
non-text content, options the template cannot honour), 404 unknown model or route, 413 body larger than
``max_body_bytes``, 422 a body that does not match the request schema (wrong types, ``max_tokens`` < 1,
``n`` < 1, ...). A request mistake never becomes a 500.

Concurrency: generation is serialized by the engine's lock (one request generates at a time, the others
wait in worker threads), so concurrent requests never mix outputs.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, AsyncIterator

from fastapi import Request  # module level: FastAPI resolves the string annotations of the endpoints here

from ..errors import TunekitError
from .protocol import ChatCompletionRequest, ChatMessage
from .toolcalls import extract_tool_calls

DEFAULT_MAX_BODY = 4 * 2**20


class APIError(Exception):
    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code

    def response(self):
        from fastapi.responses import JSONResponse

        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status)


# ------------------------------------------------------------------------------------ request -> engine
def _text(msg: ChatMessage, i: int) -> str:
    if msg.content is None:
        return ""
    if isinstance(msg.content, str):
        return msg.content
    parts = []
    for part in msg.content:
        if part.type != "text" or part.text is None:
            raise APIError(400, f"messages[{i}]: content part of type '{part.type}' is not supported (text only).",
                           param=f"messages.{i}.content")
        parts.append(part.text)
    return "".join(parts)


def to_conversation(messages: list[ChatMessage]) -> tuple[list[dict], str | None]:
    """OpenAI messages -> tunekit's (user|observation, assistant|function_call) turns and the system text."""
    if not messages:
        raise APIError(400, "messages must not be empty: send at least one user message.", param="messages")
    system: list[str] = []
    turns: list[dict] = []
    for i, msg in enumerate(messages):
        if msg.role in ("system", "developer"):
            if turns:
                raise APIError(400, f"messages[{i}]: a {msg.role} message must come before the conversation.", param="messages")
            system.append(_text(msg, i))
        elif msg.role == "user":
            turns.append({"role": "user", "content": _text(msg, i)})
        elif msg.role == "assistant" and msg.tool_calls:
            calls = []
            for call in msg.tool_calls:
                try:
                    args = json.loads(call.function.arguments or "{}")
                except json.JSONDecodeError:
                    raise APIError(400, f"messages[{i}]: tool call arguments are not valid JSON.", param=f"messages.{i}.tool_calls") from None
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
        raise APIError(400, "the last message must be a user or tool message (the model answers it).", param="messages")
    return turns, "\n".join(system) or None


def generation_args(req: ChatCompletionRequest) -> dict[str, Any]:
    gen: dict[str, Any] = {"max_new_tokens": req.max_completion_tokens or req.max_tokens, "top_p": req.top_p,
                           "stop": req.stop, "seed": req.seed}
    if req.temperature is not None:
        gen["temperature"] = req.temperature
        gen["do_sample"] = req.temperature > 0
    return gen


def _tool_calls(calls: list[tuple[str, str]]) -> list[dict]:
    return [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": n, "arguments": a}}
            for n, a in calls]


# ------------------------------------------------------------------------------------ the app
def create_app(engine, model_name: str, api_key: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY):
    import anyio
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from pydantic import ValidationError
    from starlette.exceptions import HTTPException

    app = FastAPI(title="tunekit OpenAI-compatible API", docs_url=None, redoc_url=None)
    created = int(time.time())
    tool_format = getattr(engine.template, "tool_format", None)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return exc.response()

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException):
        code = "not_found" if exc.status_code == 404 else None
        return APIError(exc.status_code, str(exc.detail), code=code).response()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        return APIError(422, _describe(exc.errors())).response()

    def check_auth(request: Request) -> None:
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        if header != f"Bearer {api_key}":
            raise APIError(401, "Incorrect or missing API key: send 'Authorization: Bearer <API_KEY>'.",
                           type_="authentication_error", code="invalid_api_key")

    def model_card() -> dict:
        return {"id": model_name, "object": "model", "created": created, "owned_by": "tunekit"}

    @app.get("/v1/models")
    async def list_models(request: Request):
        check_auth(request)
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str, request: Request):
        check_auth(request)
        if model_id != model_name:
            raise APIError(404, f"The model '{model_id}' does not exist; this server serves '{model_name}'.",
                           param="model", code="model_not_found")
        return model_card()

    async def read_request(request: Request) -> ChatCompletionRequest:
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > max_body_bytes:
            raise APIError(413, f"Request body of {int(length):,} bytes is larger than the limit of {max_body_bytes:,} bytes.",
                           code="request_too_large")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_body_bytes:
                raise APIError(413, f"Request body is larger than the limit of {max_body_bytes:,} bytes.", code="request_too_large")
        try:
            data = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise APIError(400, f"The body is not valid JSON: {exc}.") from None
        if not isinstance(data, dict):
            raise APIError(400, "The body must be a JSON object.")
        try:
            return ChatCompletionRequest.model_validate(data)
        except ValidationError as exc:
            raise APIError(422, _describe(exc.errors()), param=_first_loc(exc.errors())) from None

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        check_auth(request)
        req = await read_request(request)
        if req.model != model_name:
            raise APIError(404, f"The model '{req.model}' does not exist; this server serves '{model_name}'.",
                           param="model", code="model_not_found")
        turns, system = to_conversation(req.messages)
        tools = req.tools if req.tools and req.tool_choice != "none" else None
        gen = generation_args(req)
        try:  # render + option checks now, so mistakes are 400s before any streaming starts
            generations = [engine.start(turns, system=system, tools=tools, **gen) for _ in range(req.n)]
        except TunekitError as exc:
            raise APIError(400, str(exc), param="messages") from None
        rid, now = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return StreamingResponse(_sse(generations, rid, now, bool(tools), include_usage),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        choices = []
        for i, g in enumerate(generations):
            await anyio.to_thread.run_sync(_drain, g)
            choices.append({"index": i, "message": _message(g, bool(tools)), "finish_reason": _finish(g, bool(tools)),
                            "logprobs": None})
        return JSONResponse({"id": rid, "object": "chat.completion", "created": now, "model": model_name,
                             "choices": choices, "usage": _usage(generations)})

    def _message(g, with_tools: bool) -> dict:
        content, calls = extract_tool_calls(g.text, tool_format) if with_tools else (g.text, [])
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            msg["tool_calls"] = _tool_calls(calls)
        return msg

    def _finish(g, with_tools: bool) -> str:
        if with_tools and extract_tool_calls(g.text, tool_format)[1]:
            return "tool_calls"
        return g.finish_reason

    async def _sse(generations, rid: str, now: int, with_tools: bool, include_usage: bool) -> AsyncIterator[str]:
        def chunk(choices: list, usage: dict | None = None) -> str:
            body = {"id": rid, "object": "chat.completion.chunk", "created": now, "model": model_name, "choices": choices}
            if include_usage:
                body["usage"] = usage
            return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

        for i, g in enumerate(generations):
            yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None, "logprobs": None}])
            if with_tools:  # calls are known only at the end: send the whole reply as one delta
                await anyio.to_thread.run_sync(_drain, g)
                msg = _message(g, True)
                delta = {"content": msg["content"]} if "tool_calls" not in msg else {
                    "tool_calls": [{"index": k, **c} for k, c in enumerate(msg["tool_calls"])]}
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
                    with anyio.CancelScope(shield=True):
                        await anyio.to_thread.run_sync(iterator.close)
            yield chunk([{"index": i, "delta": {}, "finish_reason": _finish(g, with_tools), "logprobs": None}])
        if include_usage:
            yield chunk([], _usage(generations))
        yield "data: [DONE]\n\n"

    return app


def _drain(generation) -> None:
    for _ in generation:
        pass


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
