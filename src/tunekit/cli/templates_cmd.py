"""``tunekit templates [NAME]``: list the chat templates, or show what one renders and what it trains."""

from __future__ import annotations

import argparse
import json

from tunekit.data.templates import describe_templates, get_template

SAMPLE = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Italy?"},
    {"role": "assistant", "content": "Rome."},
]
SAMPLE_SYSTEM = "You are a concise assistant."
TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
TOOL_SAMPLE = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "function_call", "content": json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})},
    {"role": "observation", "content": '{"temp_c": 18}'},
    {"role": "assistant", "content": "It is 18 °C in Paris."},
]
OPEN, CLOSE = "[[", "]]"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tunekit templates",
        description="List the chat templates (no argument), or render a sample conversation with one: "
        f"the trained (response) parts are wrapped in {OPEN} {CLOSE}.",
    )
    p.add_argument("name", nargs="?", help="template name (see the list)")
    p.add_argument(
        "--system", default=SAMPLE_SYSTEM, help="system prompt of the sample ('' for the template's default)"
    )
    p.add_argument("--tools", action="store_true", help="render a function-calling sample instead")
    p.add_argument("--no-thinking", action="store_true", help="reasoning templates: enable_thinking=false")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if not args.name:
        desc = describe_templates()
        width = max(map(len, desc))
        print("Chat templates (data option `template`):")
        for name, line in desc.items():
            print(f"  {name:<{width}}  {line}")
        print("\nRun `tunekit templates NAME` to see a rendered sample and what is trained.")
        return 0
    if args.name == "jinja":
        print("jinja: renders with the model's own tokenizer chat_template; the sample depends on the model.")
        return 0
    tpl = get_template(args.name)
    messages, tools = (TOOL_SAMPLE, json.dumps(TOOLS)) if args.tools else (SAMPLE, None)
    turns = tpl.encode_turns(messages, system=args.system or None, tools=tools, enable_thinking=not args.no_thinking)
    spec = tpl.spec
    print(f"{tpl.name}: {tpl.description}")
    print(f"format of: {spec.source}")
    print(f"stop words: {', '.join(tpl.stop_words)}")
    if tpl.default_system:
        print(f"default system: {tpl.default_system!r}")
    print(f"\nSample (special tokens shown with the family's standard strings; trained parts in {OPEN} {CLOSE}):\n")
    print("".join(f"{p}{OPEN}{r}{CLOSE}" for p, r in turns))
    print("\nGeneration prompt for the last turn (what inference feeds the model):\n")
    print(
        tpl.render_prompt(messages[:-1], system=args.system or None, tools=tools, enable_thinking=not args.no_thinking)
    )
    return 0
