"""Tool-calling text formats: the tool list in the system prompt and the assistant's function calls.

The formats follow LLaMA-Factory's ``tool_utils`` (so datasets such as ``glaive_toolcall`` render the
same way), except ``qwen``/``qwen3`` which follow the official Qwen2.5 / Qwen3 chat templates exactly
(Hermes ``<tool_call>`` blocks), and ``llama3`` which uses a fixed date (LLaMA-Factory uses today's date,
which would make tokenized datasets differ from day to day).

Function-call messages hold JSON: ``{"name": ..., "arguments": {...}}`` or a list of those.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from tunekit.config.problems import Said
from tunekit.errors import DataError

DEFAULT_TOOL_PROMPT = (
    "You have access to the following tools:\n{tool_text}"
    "Use the following format if using a tool:\n"
    "```\n"
    "Action: tool name (one of [{tool_names}])\n"
    "Action Input: the input to the tool, in a JSON format representing the kwargs "
    """(e.g. ```{{"input": "hello world", "num_beams": 5}}```)\n"""
    "```\n"
)

GLM4_TOOL_PROMPT = (
    "你是一个名为 ChatGLM 的人工智能助手。你是基于智谱 AI 公司训练的语言模型 GLM-4 模型开发的，"
    "你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具{tool_text}"
)

LLAMA3_TOOL_PROMPT = (
    "Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n"
    "You have access to the following functions. To call a function, please respond with JSON for a function call. "
    """Respond in the format {{"name": function name, "parameters": dictionary of argument name and its value}}. """
    "Do not use variables.\n\n{tool_text}"
)
LLAMA3_DATE = "26 Jul 2024"  # the default date_string of the official Llama 3.1 template

HERMES_TOOLS_HEAD = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
HERMES_TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    """<tool_call></tool_call> XML tags:\n<tool_call>\n"""
    """{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>"""
)


def parse_tools(tools: str | list | None) -> list[dict[str, Any]]:
    """The tool list from a JSON string (as datasets store it) or an already parsed list."""
    if tools is None or tools == "":
        return []
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError as exc:
            raise DataError(Said("tools_invalid_json", error=str(exc), value=repr(tools[:200]))) from None
    if isinstance(tools, dict):
        tools = [tools]
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise DataError(Said("tools_not_list", value=repr(str(tools)[:200])))
    return tools


def openai_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """``{"type": "function", "function": {...}}``, the shape HF chat templates expect."""
    return tool if tool.get("type") == "function" else {"type": "function", "function": tool}


def bare_tool(tool: dict[str, Any]) -> dict[str, Any]:
    return tool.get("function", tool) if tool.get("type") == "function" else tool


def parse_calls(content: str) -> list[tuple[str, str]]:
    """``[(name, arguments_json)]`` from a function_call message."""
    try:
        calls = json.loads(content)
    except json.JSONDecodeError:
        raise DataError(Said("calls_not_json", value=repr(content[:200]))) from None
    calls = calls if isinstance(calls, list) else [calls]
    out = []
    for call in calls:
        if not isinstance(call, dict) or "name" not in call or "arguments" not in call:
            raise DataError(Said("call_needs_name", value=repr(str(call)[:200])))
        args = call["arguments"]
        if isinstance(args, str):  # some datasets store arguments as a JSON string
            with contextlib.suppress(json.JSONDecodeError):
                args = json.loads(args)
        out.append((str(call["name"]), json.dumps(args, ensure_ascii=False)))
    return out


# --- tool list -> system text -------------------------------------------------------------------


def _default_tools(tools: list[dict], system: str) -> str:
    tool_text, names = "", []
    for tool in map(bare_tool, tools):
        params = ""
        props = tool.get("parameters", {}).get("properties", {})
        required = tool.get("parameters", {}).get("required", [])
        for name, param in props.items():
            req = ", required" if name in required else ""
            enum = ", should be one of [{}]".format(", ".join(param["enum"])) if param.get("enum") else ""
            items = (
                ", where each item should be {}".format(param["items"].get("type", "")) if param.get("items") else ""
            )
            params += f"  - {name} ({param.get('type', '')}{req}): {param.get('description', '')}{enum}{items}\n"
        tool_text += (
            f"> Tool Name: {tool['name']}\nTool Description: {tool.get('description', '')}\nTool Args:\n{params}\n"
        )
        names.append(tool["name"])
    return system + DEFAULT_TOOL_PROMPT.format(tool_text=tool_text, tool_names=", ".join(names))


def _qwen25_tools(tools: list[dict], system: str) -> str:
    body = "".join("\n" + json.dumps(openai_tool(t), ensure_ascii=False) for t in tools)
    return system + "\n\n" + HERMES_TOOLS_HEAD + body + HERMES_TOOLS_TAIL


def _qwen3_tools(tools: list[dict], system: str) -> str:
    body = "".join("\n" + json.dumps(openai_tool(t), ensure_ascii=False) for t in tools)
    return (system + "\n\n" if system else "") + HERMES_TOOLS_HEAD + body + HERMES_TOOLS_TAIL


def _glm4_tools(tools: list[dict], system: str) -> str:
    text = ""
    for tool in map(bare_tool, tools):
        body = json.dumps(tool, indent=4, ensure_ascii=False)
        text += f"\n\n## {tool['name']}\n\n{body}\n在调用上述函数时，请使用 Json 格式表示调用的参数。"
    return system + GLM4_TOOL_PROMPT.format(tool_text=text)


def _llama3_tools(tools: list[dict], system: str) -> str:
    text = "".join(json.dumps(openai_tool(t), indent=4, ensure_ascii=False) + "\n\n" for t in tools)
    return system + LLAMA3_TOOL_PROMPT.format(date=LLAMA3_DATE, tool_text=text)


def _mistral_tools(tools: list[dict], system: str) -> str:
    return (
        system
        + "[AVAILABLE_TOOLS] "
        + json.dumps([openai_tool(t) for t in tools], ensure_ascii=False)
        + "[/AVAILABLE_TOOLS]"
    )


# --- function calls -> assistant text ------------------------------------------------------------


def _default_calls(calls: list[tuple[str, str]]) -> str:
    return "\n".join(f"Action: {name}\nAction Input: {args}" for name, args in calls)


def _hermes_calls(calls: list[tuple[str, str]]) -> str:
    texts = [json.dumps({"name": n, "arguments": json.loads(a)}, ensure_ascii=False) for n, a in calls]
    return "\n".join(f"<tool_call>\n{t}\n</tool_call>" for t in texts)


def _glm4_calls(calls: list[tuple[str, str]]) -> str:
    if len(calls) > 1:
        raise DataError(Said("calls_glm4_parallel"))
    return f"{calls[0][0]}\n{calls[0][1]}"


def _llama3_calls(calls: list[tuple[str, str]]) -> str:
    objs = [{"name": n, "parameters": json.loads(a)} for n, a in calls]
    return json.dumps(objs[0] if len(objs) == 1 else objs, ensure_ascii=False)


def _mistral_calls(calls: list[tuple[str, str]]) -> str:
    return json.dumps([{"name": n, "arguments": json.loads(a)} for n, a in calls], ensure_ascii=False)


TOOL_FORMATS: dict[str, tuple[Callable[[list[dict], str], str], Callable[[list[tuple[str, str]]], str]]] = {
    "default": (_default_tools, _default_calls),
    "qwen": (_qwen25_tools, _hermes_calls),
    "qwen3": (_qwen3_tools, _hermes_calls),
    "glm4": (_glm4_tools, _glm4_calls),
    "llama3": (_llama3_tools, _llama3_calls),
    "mistral": (_mistral_tools, _mistral_calls),
}
