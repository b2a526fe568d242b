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
the day it renders), and tools are refused: harmony declares them as TypeScript namespaces tunekit does not write.
"""

from __future__ import annotations

import datetime
from functools import cache

from .base import Template

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

    @property
    def prefix_text(self) -> str:
        return SYSTEM_BLOCK.format(date=today())

    def _turns(
        self, messages, system, tools, enable_thinking, history, generation: bool
    ) -> list[tuple[str, str, str]]:
        spec = self.spec
        sys_text = self._system_text(system, tools)
        pairs = [messages[i : i + 2] for i in range(0, len(messages), 2)]
        out: list[tuple[str, str, str]] = []
        for k, pair in enumerate(pairs):
            prompt = (self.prefix_text + (self._fill(spec.system, sys_text) if sys_text else "")) if k == 0 else ""
            prompt += self._user_text(k, pair[0], sys_text, -1)
            if len(pair) == 1:  # the generation prompt
                out.append((prompt + ("" if enable_thinking else EMPTY_ANALYSIS), "", ""))
                break
            reasoning, body = self._reply_body(pair[1])
            trained = not generation and (history == "trained" or k == len(pairs) - 1)
            if not enable_thinking and (trained or history == "preserved"):
                prompt, reasoning = prompt + EMPTY_ANALYSIS, None  # the thought removed, its empty message prompt
            keep = trained or history == "preserved"
            thought = ANALYSIS.format(thought=reasoning) if keep and reasoning is not None else ""
            response = thought + self._fill(spec.assistant, body)
            if not trained:  # history: the final message ends with <|end|>, not <|return|>
                response = response.removesuffix(self._sub(spec.stop_words[0])) + FINAL_END
            out.append((prompt, response, thought if trained else ""))
        return out
