"""An OpenAI chat request in tunekit's terms: the conversation's turns, the system text and the generation options.

Messages become tunekit's (user|observation, assistant|function_call) turns: system and developer messages before the
conversation become the system text, an assistant message with tool calls a ``function_call`` turn, consecutive tool
results one ``observation``. User messages may carry media parts (:mod:`tunekit.serve.media`); every other content
part must be text. A conversation the model cannot answer is a 400.
"""

from __future__ import annotations

import json
from typing import Any

from .media import is_media_part, media_source
from .protocol import ChatCompletionRequest, ChatMessage
from .request_checks import APIError


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


def _function_call_turn(msg: ChatMessage, i: int) -> dict:
    """An assistant message's tool calls as one ``function_call`` turn (their arguments must be JSON)."""
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
    return {"role": "function_call", "content": json.dumps(calls, ensure_ascii=False)}


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
            turns.append(_function_call_turn(msg, i))
        elif msg.role == "assistant":
            turns.append({"role": "assistant", "content": _text(msg, i)})
        elif turns and turns[-1]["role"] == "observation":  # consecutive tool / function results: one observation
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
    """The engine's generation options of a request (``max_new_tokens`` is checked later, against the context)."""
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
