"""Function calls in generated text -> OpenAI ``tool_calls``, for each tool format of the templates.

The inverse of the call formatters in :mod:`tunekit.data.templates.tools`: a model trained on
``function_call`` messages writes calls in its template's format, and the API hands them back as
structured calls. Text that is not a well-formed call stays plain content.

``harmony`` (``template: gpt_oss``): a message addressed to ``functions.NAME`` in the commentary channel, as the reply
splitter hands it on (``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}``) or as the official
chat template writes it (``<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{...}<|call|>``).
"""

from __future__ import annotations

import json
import re
from typing import Any

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_ACTION = re.compile(r"Action:\s*(.+?)\s*Action Input:\s*(.+?)(?=\s*Action:|\s*$)", re.DOTALL)
_HARMONY = re.compile(
    r"(?:<\|start\|>assistant)?\s*(?:to=functions\.(?P<pre>[^\s<]+)\s*)?<\|channel\|>commentary\s*"
    r"(?:to=functions\.(?P<post>[^\s<]+)\s*)?(?:<\|constrain\|>)?\s*(?:json)?<\|message\|>"
    r"(?P<args>(?:(?!<\|(?:call|end|start|return)\|>).)*)(?:<\|call\|>)?",
    re.DOTALL,
)

Call = tuple[str, str]  # (name, arguments as JSON text)


def _args(value: Any) -> str | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else None


def _objects(text: str, args_key: str) -> list[Call] | None:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    items = data if isinstance(data, list) else [data]
    calls = []
    for item in items:
        if not isinstance(item, dict) or "name" not in item:
            return None
        args = _args(item.get(args_key, item.get("arguments", item.get("parameters", {}))))
        if args is None:
            return None
        calls.append((str(item["name"]), args))
    return calls or None


def _harmony_calls(text: str) -> tuple[str | None, list[Call]]:
    calls, rest, end = [], "", 0
    for match in _HARMONY.finditer(text):
        name = match.group("pre") or match.group("post")
        if not name:  # a commentary message to the user, not a call
            continue
        args = _args(match.group("args").strip())
        if args is None:
            return text, []
        calls.append((name, args))
        rest, end = rest + text[end : match.start()], match.end()
    if not calls:
        return text, []
    rest = (rest + text[end:]).strip()
    return rest or None, calls


def extract_tool_calls(text: str, tool_format: str | None) -> tuple[str | None, list[Call]]:
    """``(remaining content or None, calls)``; no calls found -> ``(text, [])``."""
    fmt = tool_format or "qwen"
    if fmt == "harmony":
        return _harmony_calls(text)
    if fmt in ("qwen", "qwen3"):
        calls = []
        for block in _HERMES.findall(text):
            found = _objects(block, "arguments")
            if not found:
                return text, []
            calls += found
        rest = _HERMES.sub("", text).strip()
        return (rest or None, calls) if calls else (text, [])
    if fmt == "default":
        calls = []
        for name, raw in _ACTION.findall(text):
            args = _args(raw.strip().strip("`"))
            if args is None:
                return text, []
            calls.append((name.strip(), args))
        if not calls:
            return text, []
        rest = text[: text.find("Action:")].strip()
        return rest or None, calls
    if fmt == "glm4":
        name, _, raw = text.strip().partition("\n")
        args = _args(raw.strip()) if raw else None
        if args is None or not name.strip() or " " in name.strip():
            return text, []
        return None, [(name.strip(), args)]
    if fmt in ("llama3", "mistral"):
        body = text.strip().removeprefix("[TOOL_CALLS]").strip()
        calls = _objects(body, "parameters" if fmt == "llama3" else "arguments")
        return (None, calls) if calls else (text, [])
    return text, []
