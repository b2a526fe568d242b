"""``template: gpt_oss``: OpenAI's harmony format as gpt-oss's official HF chat template renders it.

What the official template (``official_gpt_oss.jinja``) renders, and so what this renders:

- always a system block: the model identity, ``Knowledge cutoff: 2024-06``, ``Current date: <today>``, ``Reasoning:
  medium`` and the valid channels; a system prompt becomes the developer message (``# Instructions``);
- ``<|start|>user<|message|>{text}<|end|>``; the generation prompt is ``<|start|>assistant``;
- the reply: its thought in the analysis channel (``<|channel|>analysis<|message|>{thought}<|end|><|start|>assistant``)
  and the answer in the final channel (``<|channel|>final<|message|>{answer}<|return|>``). ``<|return|>`` ends a
  trained reply (the model learns to stop); earlier replies, as history, are the final channel ending with ``<|end|>``
  and without their thought (``preserve_thinking`` keeps it).

``enable_thinking: false`` (LLaMA-Factory's semantics for its ``gpt_oss``): thoughts are removed and the empty analysis
message (``<|channel|>analysis<|message|><|end|><|start|>assistant``) is prompt, so the model answers in the final
channel at once. A reply without a thought trains no analysis message (the official template writes none), where
LLaMA-Factory trains an empty one. The date is the day this process first rendered one (the official template writes
the day it renders).

Tools (:mod:`.harmony_tools`, as the official template writes them): the tool list becomes the developer message's
``# Tools`` section (a TypeScript ``namespace functions``) and the system block says ``Calls to these tools must go to
the commentary channel: 'functions'.``; a ``function_call`` reply is ``<|start|>assistant to=functions.NAME
<|channel|>commentary json<|message|>{ARGS}<|call|>`` (no space before ``<|channel|>``; a trained call ends with
``<|call|>``, where the model learns to stop) after its thought's analysis message; as history a call keeps its
thought only while no final answer follows it in the conversation (the official rule); an ``observation`` is
``<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>"{OUTPUT as a JSON string}"<|end|>``, NAME the
call before it. Refused (:class:`~tunekit.errors.DataError`): a ``function_call`` message with several calls (harmony
makes one per message), an observation that follows no call, and a tool schema the official macro cannot render
(:mod:`.harmony_tools`). ``tool_format`` cannot be changed (``harmony``: the API reads generated calls with it).
"""

from __future__ import annotations

import datetime
from functools import cache

from tunekit.config.problems import Said, config_error
from tunekit.errors import DataError

from .base import Template, reply_parts
from .harmony_tools import HARMONY, TOOLS_LINE, call_of, call_text, developer_block, result_text
from .tools import parse_tools

SYSTEM_BLOCK = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: {date}\n\nReasoning: medium\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
)
ANALYSIS = "<|channel|>analysis<|message|>{thought}<|end|><|start|>assistant"
EMPTY_ANALYSIS = ANALYSIS.format(thought="")
FINAL_END = "<|end|>"


@cache
def today() -> str:
    """The date written in the system block: the day this process first asked (``strftime_now("%Y-%m-%d")``)."""
    return datetime.datetime.now().strftime("%Y-%m-%d")


class HarmonyTemplate(Template):
    """gpt-oss's harmony turns (module docstring); the spec holds its user/reply strings and stop words."""

    def __init__(self, spec, bos: str = "", eos: str = "", tool_format: str | None = None):
        if tool_format not in (None, HARMONY):
            raise config_error("harmony_tool_format", ("tool_format",), name=spec.name, tool_format=str(tool_format))
        super().__init__(spec, bos=bos, eos=eos)
        self.tool_format = HARMONY

    @property
    def prefix_text(self) -> str:
        """The system block up to its last line, which every conversation starts with (the tools line may follow)."""
        return SYSTEM_BLOCK.format(date=today()).removesuffix(FINAL_END)

    def _head(self, system: str | None, tools) -> str:
        """The system block (with the tools line when there are tools) and the developer message."""
        tool_list = parse_tools(tools)
        head = self.prefix_text + (TOOLS_LINE if tool_list else "") + FINAL_END
        return head + developer_block(system or self.default_system or "", tool_list)

    def _prompt(self, messages: list[dict], i: int) -> str:
        """Message ``i`` (user or observation) and the assistant header that opens the reply."""
        msg = messages[i]
        if msg["role"] != "observation":
            return self._fill(self.spec.user, msg["content"])
        if i == 0 or messages[i - 1]["role"] != "function_call":
            raise DataError(Said("harmony_orphan_result", index=i))
        name = call_of(reply_parts(messages[i - 1], split=True)[1], i - 1)[0]
        return result_text(name, msg["content"]) + self.spec.header

    def _turns(
        self, messages, system, tools, enable_thinking, history, generation: bool
    ) -> list[tuple[str, str, str]]:
        spec = self.spec
        pairs = [messages[i : i + 2] for i in range(0, len(messages), 2)]
        out: list[tuple[str, str, str]] = []
        for k, pair in enumerate(pairs):
            prompt = (self._head(system, tools) if k == 0 else "") + self._prompt(messages, 2 * k)
            if len(pair) == 1:  # the generation prompt
                out.append((prompt + ("" if enable_thinking else EMPTY_ANALYSIS), "", ""))
                break
            reply = pair[1]
            reasoning, body = reply_parts(reply, split=True)
            trained = not generation and (history == "trained" or k == len(pairs) - 1)
            if not enable_thinking and (trained or history == "preserved"):
                prompt, reasoning = prompt + EMPTY_ANALYSIS, None  # the thought removed, its empty message prompt
            keep = trained or history == "preserved"
            if reply["role"] == "function_call":
                # history: the official template keeps a call's thought unless a final answer follows
                keep = keep or not any(m["role"] == "assistant" for m in messages[2 * k + 2 :])
                thought = ANALYSIS.format(thought=reasoning) if keep and reasoning else ""
                out.append((prompt, thought + call_text(*call_of(body, 2 * k + 1)), thought if trained else ""))
                continue
            thought = ANALYSIS.format(thought=reasoning) if keep and reasoning is not None else ""
            response = thought + self._fill(spec.assistant, body)
            if not trained:  # history: the final message ends with <|end|>, not <|return|>
                response = response.removesuffix(self._sub(spec.stop_words[0])) + FINAL_END
            out.append((prompt, response, thought if trained else ""))
        return out
