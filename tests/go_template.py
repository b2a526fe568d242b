"""Render the subset of Go's text/template that tunekit's Ollama ``TEMPLATE`` uses, as Ollama renders it: ``.System``
and ``.Messages`` (system messages included, role "system"), if / else if / range, ``$last`` / ``$first``, ``eq``,
``not``, and Ollama's ``currentDate`` function (given here as ``date``)."""

from __future__ import annotations

import re


def go_render(template: str, system: str, messages: list[dict], date: str = "") -> str:
    parts = re.split(r"\{\{ (.*?) \}\}", template)  # text, action, text, action, ...
    pos = 0

    def block() -> list:
        nonlocal pos
        nodes = []
        while pos < len(parts):
            text, pos = parts[pos], pos + 1
            nodes.append(("text", text))
            if pos >= len(parts):
                break
            action, pos = parts[pos], pos + 1
            if action.startswith("if "):
                branches, cond = [], action[3:]
                while True:
                    body = block()
                    branches.append((cond, body))
                    closing = parts[pos - 1]
                    if not closing.startswith("else if "):
                        break
                    cond = closing[len("else if ") :]
                nodes.append(("if", branches))
            elif action.startswith("range "):
                nodes.append(("range", block()))
            elif action == "end" or action.startswith("else if "):
                return nodes
            else:
                nodes.append(("action", action))
        return nodes

    def value(expr: str, dot: dict, env: dict):
        if expr.startswith('eq .Role "'):
            return dot["role"] == expr[len('eq .Role "') : -1]
        if expr.startswith("not "):
            return not value(expr[4:], dot, env)
        if expr.startswith("$") and not expr.startswith("$."):
            return env[expr]
        return {".System": system, "$.System": system, ".Content": dot.get("content"), "currentDate": date}[expr]

    def run(nodes: list, dot: dict, env: dict) -> str:
        out = []
        for kind, arg in nodes:
            if kind == "text":
                out.append(arg)
            elif kind == "if":
                out += [run(body, dot, env) for cond, body in arg if value(cond, dot, env)][:1]
            elif kind == "range":
                for i, message in enumerate(messages):
                    out.append(run(arg, message, {**env, "$i": i, "_env": env}))
            elif arg == "$last := eq (len (slice $.Messages $i)) 1":
                env["$last"] = env["$i"] == len(messages) - 1
            elif ":=" in arg or " = " in arg:  # $first := true / $first = false (the outer variable)
                name, literal = (s.strip() for s in arg.replace(":=", "=").split("="))
                target = env.get("_env", env) if name in env.get("_env", {}) else env
                target[name] = env[name] = literal == "true"
            else:
                out.append(value(arg, dot, env))
        return "".join(out)

    return run(block(), {}, {})
