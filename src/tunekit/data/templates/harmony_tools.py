"""gpt-oss's tool calling (harmony), written as its official chat template (``official_gpt_oss.jinja``) writes it.

- the tool list: the developer message's ``# Tools`` section, ``## functions`` and a ``namespace functions { ... }``
  of TypeScript declarations, exactly as the official macros ``render_tool_namespace`` /
  ``render_typescript_type`` render them, their whitespace included (a nested object's property types follow
  ``": \\n"`` and 16 spaces, ``oneOf`` variants are joined by ``" | \\n"``, a variant's default follows 20 spaces:
  the macro's own indentation, which the model reads as the official template renders it);
- the system block's line ``Calls to these tools must go to the commentary channel: 'functions'.``;
- a call: ``<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{ARGS}<|call|>``, one per
  message (the official template reads ``tool_calls[0]`` only);
- a tool's result: ``<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>{OUTPUT}<|end|>``, its text
  as a JSON string (the template's ``content|tojson``), NAME the call before it.

A schema the macro cannot render is refused by name (:class:`~tunekit.errors.DataError` naming the tool and the
field) instead of written differently: a tool without a string ``description`` (the template fails), ``anyOf`` /
``allOf`` / ``$ref`` / ``const`` / ``not`` (the macro declares such a parameter ``any``), a schema that is not an
object, ``required`` that is not a list, and a non-string default of an ``enum`` / ``oneOf`` parameter (the template
fails).
"""

from __future__ import annotations

import json
import re
from functools import partial
from typing import Any

from tunekit.config.problems import Said
from tunekit.errors import DataError

from .tools import openai_tool, parse_calls, parse_tools

#: ``tool_format`` of ``template: gpt_oss`` (the API reads replies' calls with it)
HARMONY = "harmony"
TOOLS_LINE = "\nCalls to these tools must go to the commentary channel: 'functions'."
#: the official macros' indentation, written into their output (module docstring)
NESTED_GAP = "\n" + " " * 16
VARIANT_DEFAULT_GAP = " " * 20
#: a generated call as the reply splitter hands it on (infer/reasoning.py) and the API reads it (serve/toolcalls.py)
CALL_HEAD = "<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>"
#: the recipient of a generated message's header (``to=functions.NAME``, before or after its channel)
RECIPIENT = re.compile(r"to=functions\.([^\s<]+)")
#: keys the macro ignores: a parameter using one is declared ``any``, so it is refused (and what to write instead)
UNRENDERED = {
    "anyOf": Said("part_harmony_fix_any_of"),
    "allOf": Said("part_harmony_fix_all_of"),
    "$ref": Said("part_harmony_fix_ref"),
    "const": Said("part_harmony_fix_const"),
    "not": Said("part_harmony_fix_not"),
}
#: a schema's place: the steps from its tool down, each a ``part_harmony_*`` message waiting for the place before it
#: (``where``), made into words only when it is refused (a place is passed down for every parameter rendered)
Place = tuple[partial, ...]


def said_place(where: Place) -> Said:
    """The keyed words of a place (``tool 'f', parameter x[]``): each step names the one before it as ``{where}``."""
    first, *rest = where
    said = first()
    for step in rest:
        said = step(where=said)
    return said


def _tojson(value: Any) -> str:
    """The template's ``tojson`` filter (transformers: ``json.dumps`` with ``ensure_ascii=False``)."""
    return json.dumps(value, ensure_ascii=False)


def _node(spec: Any, where: Place) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise DataError(Said("harmony_schema_not_object", where=said_place(where), value=repr(str(spec)[:100])))
    required = spec.get("required")
    if required is not None and not isinstance(required, list):
        value = repr(str(required)[:100])
        raise DataError(Said("harmony_required_not_list", where=said_place(where), value=value))
    return spec


def _array_type(spec: dict[str, Any], where: Place) -> str:
    items = spec.get("items")
    if not items:
        return "any[]" + (" | null" if spec.get("nullable") else "")
    items = _node(items, (*where, partial(Said, "part_harmony_items")))
    simple = {"string": "string[]", "number": "number[]", "integer": "number[]", "boolean": "boolean[]"}
    item_type = items.get("type")
    if isinstance(item_type, str) and item_type in simple:
        text = simple[item_type]
    else:
        inner = ts_type(items, (*where, partial(Said, "part_harmony_items")))
        text = "any[]" if inner == "object | object" or len(inner) > 50 else inner + "[]"
    return text + (" | null" if spec.get("nullable") else "")


def _one_of(spec: dict[str, Any], where: Place) -> str:
    # the macro's object-variant check sets a variable inside its loop, which Jinja does not carry out of the
    # loop: every oneOf renders its variants
    variants = spec["oneOf"]
    out = ""
    for k, raw in enumerate(variants):
        place = (*where, partial(Said, "part_harmony_one_of", index=k))
        variant = _node(raw, place)
        out += ts_type(variant, place)
        if variant.get("description"):
            out += "// " + str(variant["description"])
        if "default" in variant:
            out += VARIANT_DEFAULT_GAP + "// default: " + _tojson(variant["default"])
        if k < len(variants) - 1:
            out += " | \n"
    return out


def _object_type(spec: dict[str, Any], where: Place) -> str:
    props = spec.get("properties")
    if not props:
        return "object"
    required = spec.get("required") or []
    fields = []
    for name, sub in props.items():
        place = (*where, partial(Said, "part_harmony_property", name=str(name)))
        fields.append(name + ("" if name in required else "?") + ": " + NESTED_GAP + ts_type(_node(sub, place), place))
    return "{\n" + ", ".join(fields) + "}"


def ts_type(spec: dict[str, Any], where: Place) -> str:
    """The official macro ``render_typescript_type`` of one JSON schema; ``where`` names it in a refusal."""
    kind = spec.get("type")
    if kind == "array":
        return _array_type(spec, where)
    if isinstance(kind, list) and kind:
        return " | ".join(map(str, kind)) if len(kind) > 1 else str(kind[0])
    if spec.get("oneOf"):
        return _one_of(spec, where)
    if kind == "string":
        if spec.get("enum"):
            return '"' + '" | "'.join(map(str, spec["enum"])) + '"'
        return "string" + (" | null" if spec.get("nullable") else "")
    if kind in ("number", "integer"):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "object":
        return _object_type(spec, where)
    unrendered = [key for key in UNRENDERED if key in spec]
    if unrendered:
        key = unrendered[0]
        raise DataError(Said("harmony_unrendered", where=said_place(where), key=key, fix=UNRENDERED[key]))
    return "any"


def _param(name: str, spec: Any, required: list, where: Place) -> str:
    spec = _node(spec, where)
    text = ("// " + str(spec["description"]) + "\n") if spec.get("description") else ""
    text += name + ("" if name in required else "?") + ": " + ts_type(spec, where)
    if "default" in spec:
        default = spec["default"]
        if spec.get("enum") or spec.get("oneOf"):
            if not isinstance(default, str):
                raise DataError(Said("harmony_default_not_text", where=said_place(where), value=_tojson(default)))
            text += (", // default: " if spec.get("enum") else "// default: ") + default
        else:
            text += ", // default: " + _tojson(default)
    return text + ",\n"


def _declaration(tool: dict[str, Any]) -> str:
    fn = openai_tool(tool).get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise DataError(Said("harmony_tool_no_name", value=repr(str(tool)[:200])))
    where = (partial(Said, "part_harmony_tool", name=fn["name"]),)
    if not isinstance(fn.get("description"), str):
        raise DataError(Said("harmony_tool_no_description", where=said_place(where)))
    head = "// " + fn["description"] + "\n" + "type " + fn["name"] + " = "
    params = _node(fn.get("parameters") or {}, (*where, partial(Said, "part_harmony_parameters")))
    if not params.get("properties"):
        return head + "() => any;\n\n"
    required = params.get("required") or []
    body = "".join(
        _param(name, spec, required, (*where, partial(Said, "part_harmony_parameter", name=str(name))))
        for name, spec in params["properties"].items()
    )
    return head + "(_: {\n" + body + "}) => any;\n\n"


def tool_namespace(tools: list[dict[str, Any]]) -> str:
    """The official ``render_tool_namespace("functions", tools)``."""
    return "## functions\n\nnamespace functions {\n\n" + "".join(map(_declaration, tools)) + "} // namespace functions"


def developer_block(instructions: str, tools: str | list | None) -> str:
    """The developer message (``# Instructions`` from the system prompt, ``# Tools``), or ``""`` when neither."""
    tool_list = parse_tools(tools)
    if not instructions and not tool_list:
        return ""
    text = f"# Instructions\n\n{instructions}\n\n" if instructions else ""
    if tool_list:
        text += "# Tools\n\n" + tool_namespace(tool_list)
    return "<|start|>developer<|message|>" + text + "<|end|>"


def call_of(content: str, index: int) -> tuple[str, str]:
    """``(name, arguments JSON)`` of function_call message ``index``: harmony has one call per message."""
    calls = parse_calls(content)
    if len(calls) != 1:
        names = ", ".join(name for name, _ in calls)
        raise DataError(Said("harmony_parallel_calls", index=index, count=len(calls), names=names))
    return calls[0]


def call_text(name: str, arguments: str) -> str:
    """A call as the official template writes it after ``<|start|>assistant``, ending with ``<|call|>``."""
    return f" to=functions.{name}<|channel|>commentary json<|message|>{arguments}<|call|>"


def result_text(name: str, content: str) -> str:
    """A tool's result (an observation) as the official template writes it, up to its ``<|end|>``."""
    return f"<|start|>functions.{name} to=assistant<|channel|>commentary<|message|>{_tojson(content)}<|end|>"
