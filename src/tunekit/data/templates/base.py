"""The render engine: turns a conversation into (prompt, response) text pairs.

One rule holds for every template: the prompt of the last turn equals ``render_prompt`` of the messages
before the reply, i.e. exactly what inference tokenizes; the response is the rest of that turn up to and
including its end-of-turn marker. Separators after the marker open the next prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

from tunekit.config.problems import Said, config_error
from tunekit.errors import DataError

from .jinja_export import chat_template_for
from .spec import TemplateSpec
from .tokenizer_fix import fix_tokenizer
from .tools import TOOL_FORMATS, parse_calls, parse_tools

logger = logging.getLogger(__name__)

USER_SIDE = ("user", "observation")
ASSISTANT_SIDE = ("assistant", "function_call")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
EMPTY_THOUGHT = "<think>\n\n</think>\n\n"
#: how the replies before the last render (``Template._turns``)
HistoryForm = Literal["trained", "official", "preserved"]


def split_thought(content: str) -> tuple[str | None, str]:
    """(reasoning or None, answer) of a plain-text reply, parsed the way the official Qwen3 template does.

    Only for text whose data did not separate the reasoning: a message's own ``reasoning`` (the canonical key
    for ``reasoning`` parts and ``reasoning_content``) is used as it is, and its text is never split
    (:func:`reply_parts`), as the official template never splits ``content`` when ``reasoning_content`` is given.
    """
    if THINK_CLOSE not in content:
        return None, content
    reasoning = content.split(THINK_CLOSE, maxsplit=1)[0].rstrip("\n").split(THINK_OPEN)[-1].lstrip("\n")
    return reasoning, content.rsplit(THINK_CLOSE, maxsplit=1)[-1].lstrip("\n")


def reply_parts(msg: dict[str, Any], split: bool) -> tuple[str | None, str]:
    """(reasoning or None, text) of a reply: its ``reasoning`` key when the data separated it (the text whole),
    else, with ``split`` (reasoning templates), the official template's parse of its plain text."""
    reasoning = msg.get("reasoning")
    if reasoning is not None:
        return reasoning, msg["content"]
    return split_thought(msg["content"]) if split else (None, msg["content"])


def think_block(reasoning: str | None) -> str:
    return "<think>\n" + (reasoning or "").strip("\n") + "\n</think>\n\n"


def check_messages(messages: Sequence[dict[str, Any]], *, for_prompt: bool) -> None:
    """Roles alternate (user|observation), (assistant|function_call); training ends on a reply."""
    if not messages:
        raise DataError(Said("template_no_messages"))
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or "role" not in msg or not isinstance(msg.get("content"), str):
            raise DataError(Said("template_message_shape", index=i, value=repr(str(msg)[:200])))
        if not isinstance(msg.get("reasoning"), (str, type(None))):
            raise DataError(Said("template_reasoning_not_text", index=i, type=type(msg["reasoning"]).__name__))
        want = USER_SIDE if i % 2 == 0 else ASSISTANT_SIDE
        if msg["role"] not in want:
            raise DataError(Said("template_role_order", index=i, role=str(msg["role"]), roles="/".join(want)))
    last_role = messages[-1]["role"]
    if for_prompt and last_role not in USER_SIDE:
        raise DataError(Said("template_prompt_end"))
    if not for_prompt and last_role not in ASSISTANT_SIDE:
        raise DataError(Said("template_training_end"))


class Template:
    """A chat template bound to the special-token strings of one tokenizer."""

    def __init__(self, spec: TemplateSpec, bos: str = "", eos: str = "", tool_format: str | None = None):
        self.spec = spec
        self.name: str = spec.name
        self.description: str = spec.description
        self.default_system: str | None = spec.default_system
        self.bos, self.eos = bos, eos
        self.tool_format: str | None = tool_format if tool_format is not None else spec.tool_format
        if self.tool_format is not None and self.tool_format not in TOOL_FORMATS:
            formats = ", ".join(TOOL_FORMATS)
            raise config_error(
                "template_unknown_tool_format", ("tool_format",), value=str(self.tool_format), formats=formats
            )
        stops = [self._sub(w) for w in spec.stop_words] + [eos]
        self.stop_words: list[str] = list(dict.fromkeys(s for s in stops if s))

    def __repr__(self) -> str:
        return f"Template({self.name!r})"

    # --- public API -------------------------------------------------------------------------------

    def encode_turns(
        self,
        messages: Sequence[dict[str, Any]],
        system: str | None = None,
        tools: str | list | None = None,
        enable_thinking: bool = True,
        *,
        strip_history_thoughts: bool = False,
        preserve_thinking: bool = False,
    ) -> list[tuple[str, str]]:
        """One (prompt_text, response_text) per turn; their concatenation is the whole conversation.

        ``strip_history_thoughts`` (reasoning templates only): render earlier replies the way the official
        Qwen3 template renders history (without their ``<think>`` block) instead of training every reply
        with its thought. Use it when only the last reply is trained (``mask_history``).
        ``preserve_thinking`` (LLaMA-Factory's option): earlier replies that are not trained keep their thought
        block instead (the empty block for a reply without a thought, or every reply with ``enable_thinking``
        false, whose thoughts are removed), as Qwen3.6's official template renders history with
        ``preserve_thinking=True``.
        """
        marked = self.encode_turns_marked(
            messages,
            system,
            tools,
            enable_thinking,
            strip_history_thoughts=strip_history_thoughts,
            preserve_thinking=preserve_thinking,
        )
        return [(prompt, response) for prompt, response, _ in marked]

    def encode_turns_marked(
        self,
        messages: Sequence[dict[str, Any]],
        system: str | None = None,
        tools: str | list | None = None,
        enable_thinking: bool = True,
        *,
        strip_history_thoughts: bool = False,
        preserve_thinking: bool = False,
    ) -> list[tuple[str, str, str]]:
        """:meth:`encode_turns` with a third text per turn: the response's start up to the end of the thought block
        it trains (``<think>`` ... ``</think>`` + its separator; the empty block of a reply without a thought), or
        ``""`` when the response trains no thought (``thought_loss_weight`` reads it)."""
        check_messages(messages, for_prompt=False)
        history = "trained" if not strip_history_thoughts else "preserved" if preserve_thinking else "official"
        turns = self._turns(list(messages), system, tools, enable_thinking, history, generation=False)
        if self.spec.role_handoff:
            turns = self._handoff(turns)
        return turns

    @property
    def prefix_text(self) -> str:
        """What a conversation starts with (BOS, ``[gMASK]sop`` ...); the cutoff policy always keeps it."""
        return self._sub(self.spec.prefix)

    def render_prompt(
        self,
        messages: Sequence[dict[str, Any]],
        system: str | None = None,
        tools: str | list | None = None,
        enable_thinking: bool = True,
        *,
        preserve_thinking: bool = False,
    ) -> str:
        """The generation prompt for a conversation ending with a user/observation message (``preserve_thinking``:
        earlier replies keep their thought block, see :meth:`encode_turns`)."""
        check_messages(messages, for_prompt=True)
        history = "preserved" if preserve_thinking else "official"
        turns = self._turns(list(messages), system, tools, enable_thinking, history, generation=True)
        return "".join(p + r for p, r, _ in turns)

    def render(self, messages, system=None, tools=None, enable_thinking=True, **kw) -> str:
        """The whole training string (concatenated turns)."""
        return "".join(p + r for p, r in self.encode_turns(messages, system, tools, enable_thinking, **kw))

    def chat_template_jinja(self, enable_thinking: bool = True) -> str | None:
        """An HF chat_template rendering exactly what this template renders (for exported models).

        ``enable_thinking=False`` (reasoning templates): thinking is off unless the caller turns it on,
        matching a model trained with ``enable_thinking: false``.
        """
        return chat_template_for(self, enable_thinking)

    def fix_tokenizer(self, tokenizer: Any) -> None:
        fix_tokenizer(tokenizer, self.stop_words if self.spec.replace_eos else [], self.stop_words)

    # --- engine -----------------------------------------------------------------------------------

    def _sub(self, fmt: str) -> str:
        return fmt.replace("{bos}", self.bos).replace("{eos}", self.eos)

    def _fill(self, fmt: str, content: str) -> str:
        pre, _, post = fmt.partition("{content}")
        pre = self._sub(pre)
        if self.spec.tight_before and content.startswith(self.spec.tight_before) and pre.endswith(" "):
            pre = pre[:-1]
        return pre + content + self._sub(post)

    def _system_text(self, system: str | None, tools: str | list | None) -> str:
        # the system message is trimmed where the family trims it (llama3), the tool text never: Llama 3.1's
        # official template ends the tool list with "\n\n" after the last schema
        text = self._trim("system", system or self.default_system or "")
        tool_list = parse_tools(tools)
        if tool_list:
            if self.tool_format is None:
                raise config_error("template_no_tools", ("template",), name=self.name)
            text = TOOL_FORMATS[self.tool_format][0](tool_list, text)
        return text

    def _trim(self, role: str, text: str) -> str:
        return text.strip() if role in self.spec.trim else text

    def _user_text(self, k: int, msg: dict, sys_text: str, last_user_turn: int) -> str:
        spec = self.spec
        role = msg["role"]
        if role == "observation":
            return self._fill(spec.observation or spec.user, self._trim("observation", msg["content"]))
        content = msg["content"]
        merge = sys_text and (
            (spec.system_in == "first_user" and k == 0) or (spec.system_in == "last_user" and k == last_user_turn)
        )
        if spec.trim_after_merge:
            if merge:
                content = self._fill(spec.system, sys_text) + content
            content = self._trim("user", content)
        else:
            content = self._trim("user", content)
            if merge:
                content = self._fill(spec.system, sys_text) + content
        return self._fill(spec.user, content)

    def _reply_body(self, msg: dict) -> tuple[str | None, str]:
        """(reasoning, body text) of an assistant-side message, function calls formatted.

        A template without a thinking block writes a separated reasoning as a ``<think>`` block in front of the
        reply (LLaMA-Factory's rendering of reasoning data); a plain-text thought is kept verbatim.
        """
        reasoning, content = reply_parts(msg, split=self.spec.reasoning)
        thought = ""
        if not self.spec.reasoning and reasoning is not None:
            thought, reasoning = (think_block(reasoning) if reasoning.strip() else ""), None
        if msg["role"] == "function_call":
            if self.tool_format is None:
                raise config_error("template_no_calls", ("template",), name=self.name)
            plain = (
                msg.get("reasoning") is None
            )  # a thought written in the text is kept verbatim, as LLaMA-Factory does
            if not self.spec.reasoning and plain and THINK_CLOSE in content:
                cut = content.index(THINK_CLOSE) + len(THINK_CLOSE)
                thought, content = content[:cut] + "\n\n", content[cut:].lstrip("\n")
            content = TOOL_FORMATS[self.tool_format][1](parse_calls(content))
        return reasoning, self._trim("assistant", thought + content)

    def _turns(
        self, messages, system, tools, enable_thinking, history: HistoryForm, generation: bool
    ) -> list[tuple[str, str, str]]:
        """``history``: how replies before the last render (reasoning templates): ``trained`` (each with its thought,
        as trained), ``official`` (the official Qwen3 history: thoughts only after the last user query) or
        ``preserved`` (untrained, each with its thought block: ``preserve_thinking``)."""
        spec = self.spec
        sys_text = self._system_text(system, tools)
        pairs = [messages[i : i + 2] for i in range(0, len(messages), 2)]
        user_turns = [k for k, pair in enumerate(pairs) if pair[0]["role"] == "user"]
        last_user_turn = user_turns[-1] if user_turns else -1
        out: list[tuple[str, str, str]] = []
        for k, pair in enumerate(pairs):
            prompt = ""
            if k == 0:
                prompt += self._sub(spec.prefix)
                if sys_text and spec.system_in == "block":
                    prompt += self._fill(spec.system, sys_text)
            else:
                prompt += self._sub(spec.sep)
            prompt += self._user_text(k, pair[0], sys_text, last_user_turn)
            is_last = k == len(pairs) - 1
            if len(pair) == 1:  # the generation prompt
                if spec.reasoning:
                    prompt += EMPTY_THOUGHT if not enable_thinking else spec.think_prompt
                out.append((prompt, "", ""))
                break
            reply = pair[1]
            fmt = spec.function if reply["role"] == "function_call" and spec.function else spec.assistant
            reasoning, body = self._reply_body(reply)
            thought = ""
            if spec.reasoning:
                trained_thought = not generation and (history == "trained" or is_last)
                if trained_thought:
                    if enable_thinking:  # the thought (empty if none) is part of the trained reply
                        thought = think_block(reasoning)
                        if spec.think_prompt:  # ... after the text the generation prompt opens it with (R1)
                            prompt, thought = prompt + spec.think_prompt, thought.removeprefix(spec.think_prompt)
                        body = thought + body.lstrip("\n")
                    else:  # thoughts removed; the empty block is prompt, like the official enable_thinking=False
                        prompt += EMPTY_THOUGHT
                elif history == "preserved" and enable_thinking:  # preserve_thinking: an earlier reply keeps its block
                    body = think_block(reasoning) + body.lstrip("\n")
                elif history == "preserved":  # ... with its thought removed: the empty block, in the prompt (LF)
                    prompt += EMPTY_THOUGHT
                elif k >= last_user_turn and reasoning:  # official history: kept only after the last user query
                    body = think_block(reasoning) + body.lstrip("\n")
            response = self._fill(fmt, body)
            out.append((prompt, response, response[: response.index(thought) + len(thought)] if thought else ""))
        return out

    def _handoff(self, turns: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        """Move the role token that ends each reply (GLM's <|user|>) from the next prompt into the reply."""
        fixed = [list(t) for t in turns]
        for k in range(1, len(fixed)):
            prompt = fixed[k][0]
            for token in self.spec.role_handoff:
                if prompt.startswith(token):
                    fixed[k - 1][1] += token
                    fixed[k][0] = prompt[len(token) :]
                    break
        fixed[-1][1] += self._sub(self.spec.final_stop)
        return [tuple(t) for t in fixed]
