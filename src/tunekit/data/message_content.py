"""Message content: a string or typed parts, into the canonical message's text, reasoning and tool calls.

A message ``content`` may be a string or a list of typed parts (:func:`content_parts`):

- ``{"type": "text", "text": ...}`` (OpenAI) or ``{"type": "text", "value": ...}`` (LLaMA-Factory v1): text,
  joined without separator;
- ``{"type": "reasoning", "value": ...}`` (assistant only): the reply's thought, kept apart from its text in the
  message's ``reasoning`` key (as ``reasoning_content`` is), never joined into the text and parsed back: reasoning
  templates (qwen3) render it as their thinking block and keep the text whole, whatever ``<think>`` / ``</think>``
  it quotes (the official template's rule for ``reasoning_content``); a template without a thinking block writes
  it as a ``<think>\\n...\\n</think>\\n\\n`` block in front of the reply, as LLaMA-Factory does;
- ``{"type": "tool_call", "value": '{"name": ..., "arguments": ...}'}`` (assistant only): the reply becomes
  a ``function_call`` message (several calls: a JSON list), rendered in the template's tool-call format.

OpenAI assistant messages may instead carry ``tool_calls`` (and ``reasoning_content``): :func:`openai_extras`.
Media parts (``image_url``, ...) and unknown part types are named errors, never dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

from ..config.problems import Said
from ..errors import RecordError
from .media_columns import MEDIA_PARTS
from .readers import RawRecord

PART_TYPES = ("text", "reasoning", "tool_call")


def content_text(value: Any, raw: RawRecord, what: str) -> str:
    """The text of a content that is not a reply: a string, a number or text parts (``what`` names it in errors)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, list):
        text, reasoning, calls = content_parts(value, raw, what)
        if reasoning is not None or calls:
            kind = "reasoning" if reasoning is not None else "tool_call"
            raise RecordError(Said("record_parts_not_for_prompt", where=raw.where, what=what, kind=kind))
        return text
    raise RecordError(Said("record_content_not_text", where=raw.where, what=what, type=type(value).__name__))


def content_parts(value: Any, raw: RawRecord, what: str) -> tuple[str, str | None, list[Any]]:
    """(text, reasoning or None, tool calls) of a content given as typed parts (see the module docstring)."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[Any] = []
    for j, part in enumerate(value):
        where = partial(Said, "part_where_part", where=raw.where, what=what, index=j)  # made only for an error
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            types, value = ", ".join(PART_TYPES), repr(str(part)[:120])
            raise RecordError(Said("record_part_no_type", where=where(), types=types, value=value))
        if kind in MEDIA_PARTS:
            raise RecordError(Said("record_part_media", where=where(), kind=kind, media=MEDIA_PARTS[kind]))
        if kind not in PART_TYPES:
            raise RecordError(Said("record_part_unknown_type", where=where(), kind=kind, types=", ".join(PART_TYPES)))
        # OpenAI keys text parts 'text', LLaMA-Factory v1 'value' (a hub dataset's Arrow rows carry both, one None)
        key = "text" if kind == "text" and isinstance(part.get("text"), str) else "value"
        body = part.get(key)
        if kind == "tool_call":
            calls.append(parse_tool_call(body, where))
            continue
        if not isinstance(body, str):
            raise RecordError(
                Said("record_part_not_string", where=where(), kind=kind, key=key, type=type(body).__name__)
            )
        (texts if kind == "text" else thoughts).append(body)
    return "".join(texts), ("".join(thoughts) if thoughts else None), calls


def parse_tool_call(body: Any, where: Callable[[], str]) -> dict[str, Any]:
    """A tool call (JSON text or an object) as ``{"name", "arguments"}``; ``where()`` names it in errors (made only
    for an error: a valid call costs no message)."""
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except json.JSONDecodeError as exc:
            said = Said("record_tool_call_json", where=where(), error=exc.msg, value=repr(body[:200]))
            raise RecordError(said) from None
    if not isinstance(body, dict) or "name" not in body or "arguments" not in body:
        raise RecordError(Said("record_tool_call_shape", where=where(), value=repr(str(body)[:200])))
    return {"name": body["name"], "arguments": body["arguments"]}


def reply_message(
    value: Any, raw: RawRecord, what: str, extra_calls: list[Any] | None = None, extra_reasoning: str | None = None
) -> dict[str, str]:
    """The canonical message of an assistant reply whose content may hold reasoning / tool_call parts.

    The reasoning the data separates (``reasoning`` parts, ``reasoning_content``) stays in its own ``reasoning``
    key and the text stays whole: the template renders the two (``templates/base.py``), nothing re-parses text.
    """
    if isinstance(value, list):
        text, reasoning, calls = content_parts(value, raw, what)
    else:
        text, reasoning, calls = content_text(value, raw, what), None, []
    calls = calls + list(extra_calls or [])
    if extra_reasoning is not None:
        reasoning = (reasoning or "") + extra_reasoning
    thought = {} if reasoning is None else {"reasoning": reasoning}
    if not calls:
        return {"role": "assistant", "content": text, **thought}
    if text.strip():
        raise RecordError(Said("record_text_and_calls", where=raw.where, what=what))
    return {
        "role": "function_call",
        "content": json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False),
        **thought,
    }


def reply_text(message: dict[str, Any]) -> str:
    """A reply as one plain text (stage pt): its separated reasoning as a ``<think>`` block in front of its text."""
    reasoning = message.get("reasoning")
    thought = "<think>\n" + reasoning.strip("\n") + "\n</think>\n\n" if reasoning and reasoning.strip() else ""
    return thought + message["content"]


def is_empty_reply(message: dict[str, Any]) -> bool:
    """No text and no reasoning (a reply with only a thought still trains its thinking block)."""
    return not message["content"].strip() and not (message.get("reasoning") or "").strip()


def openai_extras(msg: dict[str, Any], raw: RawRecord, what: str) -> tuple[list[Any], str | None]:
    """OpenAI-style ``tool_calls`` and ``reasoning_content`` fields of an assistant message."""
    calls = []
    tool_calls = msg.get("tool_calls")
    if tool_calls:
        if not isinstance(tool_calls, list):
            kind = type(tool_calls).__name__
            raise RecordError(Said("record_tool_calls_not_list", where=raw.where, what=what, type=kind))
        for j, call in enumerate(tool_calls):
            fn = call.get("function", call) if isinstance(call, dict) else call
            calls.append(
                parse_tool_call(fn, partial(Said, "part_where_tool_call", where=raw.where, what=what, index=j))
            )
    reasoning = msg.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        kind = type(reasoning).__name__
        raise RecordError(Said("record_reasoning_not_text", where=raw.where, what=what, type=kind))
    return calls, reasoning
