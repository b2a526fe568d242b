"""The OpenAI response bodies of finished generations: a ``chat.completion``, or the ``chat.completion.chunk`` events
of a streamed reply (server-sent events ending in ``data: [DONE]``), with tool calls when the request offered tools.

A reasoning model's reply (a template with thought markers: :mod:`tunekit.infer.reasoning`) is split as vLLM's
reasoning parsers and DeepSeek's API return it: the message's ``reasoning_content`` (the thought; null without one)
beside ``content`` (the answer, where tool calls are read); streamed, ``delta.reasoning_content`` chunks while the
thought streams, then ``delta.content`` chunks."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import anyio

from ..infer.reasoning import THOUGHT
from .streaming import drain
from .toolcalls import extract_tool_calls

SHUTTING_DOWN = "The server is shutting down; the generation was stopped."


@dataclass(frozen=True)
class Reply:
    """One request's reply: the id, time and model every body names, and how its text is read (tool calls or not)."""

    rid: str
    created: int
    model: str
    tool_format: Any
    with_tools: bool
    reasoning: bool = False  # the template has thought markers: messages carry reasoning_content


def _tool_calls(calls: list[tuple[str, str]]) -> list[dict]:
    return [
        {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": n, "arguments": a}}
        for n, a in calls
    ]


def reply_message(g, reply: Reply) -> dict:
    """The assistant message of a finished generation; with tools, the calls its text makes."""
    content, calls = extract_tool_calls(g.text, reply.tool_format) if reply.with_tools else (g.text, [])
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if reply.reasoning:
        msg["reasoning_content"] = g.reasoning or None
    if calls:
        msg["tool_calls"] = _tool_calls(calls)
    return msg


def finish_reason(g, reply: Reply) -> str:
    if reply.with_tools and extract_tool_calls(g.text, reply.tool_format)[1]:
        return "tool_calls"
    return g.finish_reason


def usage(generations) -> dict:
    prompt = sum(g.prompt_tokens for g in generations)
    completion = sum(g.completion_tokens for g in generations)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def choice(i: int, g, reply: Reply) -> dict:
    """Choice ``i`` of a ``chat.completion``: a finished generation."""
    return {"index": i, "message": reply_message(g, reply), "finish_reason": finish_reason(g, reply), "logprobs": None}


def completion(reply: Reply, choices: list[dict], generations) -> dict:
    """A whole ``chat.completion`` body."""
    return {
        "id": reply.rid,
        "object": "chat.completion",
        "created": reply.created,
        "model": reply.model,
        "choices": choices,
        "usage": usage(generations),
    }


async def _deltas(g, reply: Reply) -> AsyncIterator[dict]:
    """The deltas of one choice: its text as it is generated, or (with tools) the whole reply at its end."""
    if reply.with_tools:  # calls are known only at the end: send the whole reply as one delta
        try:
            await anyio.to_thread.run_sync(drain, g, abandon_on_cancel=True)
        finally:  # client gone: the worker thread stops at its next token
            g.cancel()
        msg = reply_message(g, reply)
        if msg.get("reasoning_content"):
            yield {"reasoning_content": msg["reasoning_content"]}
        if "tool_calls" not in msg:
            yield {"content": msg["content"]}
        else:
            yield {"tool_calls": [{"index": k, **c} for k, c in enumerate(msg["tool_calls"])]}
        return
    iterator = g.parts()
    try:
        while True:
            part = await anyio.to_thread.run_sync(next, iterator, None)
            if part is None:
                break
            kind, text = part
            yield {"reasoning_content": text} if kind == THOUGHT else {"content": text}
    finally:  # client gone or done: stop generating and release the engine's lock
        g.cancel()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(iterator.close)


async def sse_events(reply: Reply, generations, include_usage: bool, state: dict) -> AsyncIterator[str]:
    """The server-sent events of a streamed reply, choice after choice; an error event when the server stops."""

    def chunk(choices: list, usage_: dict | None = None) -> str:
        body = {
            "id": reply.rid,
            "object": "chat.completion.chunk",
            "created": reply.created,
            "model": reply.model,
            "choices": choices,
        }
        if include_usage:
            body["usage"] = usage_
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    for i, g in enumerate(generations):
        yield chunk(
            [{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None, "logprobs": None}]
        )
        async with aclosing(_deltas(g, reply)) as deltas:  # closed at once when the client leaves
            async for delta in deltas:
                yield chunk([{"index": i, "delta": delta, "finish_reason": None, "logprobs": None}])
        if state["stopping"]:
            error = {"message": SHUTTING_DOWN, "type": "server_error", "param": None, "code": "shutting_down"}
            yield f"data: {json.dumps({'error': error})}\n\n"
            return
        yield chunk([{"index": i, "delta": {}, "finish_reason": finish_reason(g, reply), "logprobs": None}])
    if include_usage:
        yield chunk([], usage(generations))
    yield "data: [DONE]\n\n"
