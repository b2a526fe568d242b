"""``template: jinja``: render with the tokenizer's own ``chat_template`` and find the assistant spans.

The spans come from rendering successive prefixes of the conversation: turn k's prompt is the rendering
of the messages up to its user message with ``add_generation_prompt=True``; its reply is what the
rendering up to the reply adds after that, minus trailing whitespace (which opens the next prompt).

Limitation: this needs a *prefix-preserving* template: rendering more messages must not change how the
earlier ones render. Templates that rewrite history break it, e.g. Qwen3's, which drops the ``<think>``
block of earlier replies; such conversations raise a ConfigError that names the turn (single-turn
conversations still work). Use the named template instead (``qwen3``), which handles this explicitly.
When the template puts no end-of-turn marker after a reply (GLM style), the tokenizer's EOS is appended to
the last reply so the model learns to stop.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tunekit.config.problems import Said, config_error

from .base import check_messages, reply_parts, think_block
from .tokenizer_fix import fix_tokenizer
from .tools import openai_tool, parse_calls, parse_tools

_PROBE = "\u2063tunekit-probe\u2063"


class JinjaTemplate:
    """Duck-types :class:`Template` on top of ``tokenizer.apply_chat_template``."""

    name = "jinja"
    description = "the tokenizer's own chat_template"

    def __init__(self, tokenizer: Any):
        template = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
        if not isinstance(template, str) or not template.strip():
            what = Said("part_jinja_no_tokenizer" if tokenizer is None else "part_jinja_tokenizer_lacks")
            raise config_error("jinja_no_chat_template", ("template",), what=what)
        self.tokenizer = tokenizer
        self.default_system: str | None = None
        eos = getattr(tokenizer, "eos_token", None)
        self.stop_words: list[str] = list(dict.fromkeys([w for w in [self._probe_stop(), eos] if w]))

    def __repr__(self) -> str:
        return "JinjaTemplate()"

    # --- helpers ----------------------------------------------------------------------------------

    def _render(
        self, messages: list[dict], tools: list | None, gen: bool, enable_thinking: bool, preserve: bool = False
    ) -> str:
        # preserve_thinking is passed only when set: chat templates that read it (Qwen3.5/3.6) keep history thoughts
        extra = {"preserve_thinking": True} if preserve else {}
        try:
            return self.tokenizer.apply_chat_template(
                messages,
                tools=tools,
                add_generation_prompt=gen,
                tokenize=False,
                enable_thinking=enable_thinking,
                **extra,
            )
        except Exception as exc:  # jinja TemplateError, raise_exception(...) in the template, ...
            raise config_error("jinja_render_failed", ("template",), error=str(exc)) from None

    def _probe_stop(self) -> str | None:
        """The special token a reply ends with (``<|im_end|>``, ``<|eot_id|>``), if the template writes one."""
        try:
            msgs = [{"role": "user", "content": "x"}, {"role": "assistant", "content": _PROBE}]
            text = self.tokenizer.apply_chat_template(msgs, tokenize=False)
            tail = text[text.rindex(_PROBE) + len(_PROBE) :].strip()
        except Exception:
            return None
        special = set(getattr(self.tokenizer, "all_special_tokens", []) or []) | set(
            getattr(self.tokenizer, "get_added_vocab", dict)() or {}
        )
        return tail if tail and tail in special else None

    def _hf_messages(self, messages: Sequence[dict], system: str | None) -> list[dict]:
        """The OpenAI form the chat_template reads. A reply's separated reasoning goes in ``reasoning_content`` (its
        text whole) when the chat_template reads that key, else in front of the text as a ``<think>`` block (as
        named templates without a thinking block write it); a plain-text reply goes as it is."""
        reads_reasoning = "reasoning_content" in self.tokenizer.chat_template
        out: list[dict] = [{"role": "system", "content": system}] if system else []
        for msg in messages:
            role, content = msg["role"], msg["content"]
            if role == "observation":
                out.append({"role": "tool", "content": content})
                continue
            reasoning = msg.get("reasoning")
            if role == "function_call":
                reasoning, rest = reply_parts(msg, split=True)
                calls = [
                    {"type": "function", "function": {"name": n, "arguments": json.loads(a)}}
                    for n, a in parse_calls(rest)
                ]
                item: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": calls}
            else:
                item = {"role": role, "content": content}
            if reasoning is not None and reads_reasoning:
                item["reasoning_content"] = reasoning
            elif reasoning is not None and reasoning.strip():
                item["content"] = think_block(reasoning) + item["content"]
            out.append(item)
        return out

    # --- Template API -----------------------------------------------------------------------------

    def encode_turns(
        self,
        messages: Sequence[dict[str, Any]],
        system: str | None = None,
        tools: str | list | None = None,
        enable_thinking: bool = True,
        *,
        preserve_thinking: bool = False,
        **_: Any,
    ) -> list[tuple[str, str]]:
        check_messages(messages, for_prompt=False)
        tool_list = [openai_tool(t) for t in parse_tools(tools)] or None
        hf = self._hf_messages(messages, system)
        offset = len(hf) - len(messages)
        turns: list[tuple[str, str]] = []
        consumed, prev_full = 0, ""
        n_turns = len(messages) // 2
        for k in range(n_turns):
            upto_user = offset + 2 * k + 1
            prompt_full = self._render(hf[:upto_user], tool_list, True, enable_thinking, preserve_thinking)
            full = self._render(hf[: upto_user + 1], tool_list, False, enable_thinking, preserve_thinking)
            if not prompt_full.startswith(prev_full):
                raise config_error("jinja_not_prefix_preserving", ("template",), turn=k + 1)
            if not full.startswith(prompt_full):
                raise config_error("jinja_reply_not_continued", ("template",), turn=k + 1)
            tail = full[len(prompt_full) :]
            reply = tail.rstrip()
            if k == n_turns - 1 and not any(reply.endswith(s) for s in self.stop_words):
                reply += getattr(self.tokenizer, "eos_token", None) or ""
            turns.append((prompt_full[consumed:], reply))
            consumed = len(prompt_full) + len(tail.rstrip())
            prev_full = full
        return turns

    def render_prompt(
        self,
        messages: Sequence[dict[str, Any]],
        system: str | None = None,
        tools: str | list | None = None,
        enable_thinking: bool = True,
        *,
        preserve_thinking: bool = False,
    ) -> str:
        check_messages(messages, for_prompt=True)
        tool_list = [openai_tool(t) for t in parse_tools(tools)] or None
        return self._render(self._hf_messages(messages, system), tool_list, True, enable_thinking, preserve_thinking)

    def render(self, messages, system=None, tools=None, enable_thinking=True, **kw) -> str:
        return "".join(p + r for p, r in self.encode_turns(messages, system, tools, enable_thinking))

    def chat_template_jinja(self, enable_thinking: bool = True) -> str | None:
        return self.tokenizer.chat_template

    def fix_tokenizer(self, tokenizer: Any) -> None:
        fix_tokenizer(tokenizer, [], self.stop_words)
