"""A reasoning model's reply split into its thought and its answer: one parser per template family.

Every place tunekit shows a reply reads it through here (the API's ``reasoning_content`` beside ``content``, the
streamed ``delta.reasoning_content`` chunks, ``tunekit chat``, the board's chat, ``tunekit predict``'s ``reasoning``
field), streamed or whole: the whole reply is the streamed one fed in one piece, so both split alike.

- **think blocks** (templates with thought markers: ``qwen3``, ``qwen3_vl``, ``deepseekr1``): ``<think>`` ...
  ``</think>`` (the markers :mod:`tunekit.data.templates.base` renders), parsed as the official Qwen3 template parses
  a reply: the thought without the newlines around it, the answer without the newlines it starts with. A reply that
  does not start with ``<think>`` is all answer; a thought that never closes (``max_new_tokens`` reached) stays the
  thought, with an empty answer. Where the generation prompt opens the thought itself (R1's ``<think>\\n``,
  ``think_prompt``) the reply starts inside it (an opening ``<think>`` written again is dropped), unless
  ``enable_thinking`` is off (the prompt then holds the closed empty block and the reply is all answer).
- **harmony** (``gpt_oss``): the reply is read with its special tokens kept (:func:`keeps_markup`): each message is a
  header (``<|channel|>analysis``, ``<|start|>assistant<|channel|>final``) up to ``<|message|>`` and a body up to
  ``<|end|>``, ``<|start|>``, ``<|return|>`` or ``<|call|>``; the analysis channel is the thought, every other channel
  (final, commentary) the answer. ``<|return|>`` / ``<|call|>`` end the reply (generation stops on them). A message
  addressed to a tool (``to=functions.NAME`` in its header, before or after its channel) is a call: its answer text is
  ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>`` and its arguments, which the API returns
  as ``tool_calls`` (:mod:`tunekit.serve.toolcalls`).
- ``template: jinja`` (an exported folder's own chat template): split as think blocks when that template writes
  ``</think>`` (tunekit's export of ``qwen3`` / ``deepseekr1``, the official Qwen3 one), starting inside the thought
  when its generation prompt ends with ``<think>``; harmony folders need ``template: gpt_oss``.
- every other template: the whole reply is the answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TextIO

from ..data.templates.base import THINK_CLOSE, THINK_OPEN
from ..data.templates.harmony import HarmonyTemplate
from ..data.templates.harmony_tools import CALL_HEAD, RECIPIENT
from ..data.templates.jinja_mode import JinjaTemplate

THOUGHT, ANSWER = "reasoning", "content"
Part = tuple[str, str]  # (THOUGHT or ANSWER, text)

HARMONY_MESSAGE, HARMONY_CHANNEL = "<|message|>", "<|channel|>"
HARMONY_ENDS = ("<|end|>", "<|start|>", "<|return|>", "<|call|>")
HARMONY_FINAL = ("<|return|>", "<|call|>")
HARMONY_MARKERS = (HARMONY_MESSAGE, HARMONY_CHANNEL, "<|constrain|>", *HARMONY_ENDS)


def held_back(text: str, markers: Iterable[str]) -> int:
    """How many characters at the end of ``text`` could be the start of one of ``markers`` (kept back until the next
    piece decides): a marker split across pieces, or a stop string (:class:`tunekit.infer.stops.StopText`)."""
    keep = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), 0, -1):
            if text.endswith(marker[:k]):
                keep = max(keep, k)
                break
    return keep


class PlainSplitter:
    """A template without thought markers: every piece is answer."""

    def feed(self, text: str) -> list[Part]:
        return [(ANSWER, text)] if text else []

    def close(self) -> list[Part]:
        return []


class ThinkSplitter:
    """``<think>`` ... ``</think>`` then the answer (module docstring); feed text pieces, then ``close``."""

    def __init__(self, opened: bool = False) -> None:
        self.state = "thought" if opened else "start"
        self.opened = opened  # the prompt opened the thought: an opening tag written again is dropped
        self.pending = ""
        self.began = False  # the current part has shown text (its leading newlines are dropped until then)

    def _emit(self, kind: str, text: str, out: list[Part]) -> None:
        if not self.began:
            text = text.lstrip("\n")
            self.began = bool(text)
        if text:
            out.append((kind, text))

    def _switch(self, state: str) -> None:
        self.state, self.began = state, False

    def feed(self, text: str) -> list[Part]:
        self.pending += text
        out: list[Part] = []
        while True:
            if self.state == "start" or (self.state == "thought" and self.opened and not self.began):
                head = self.pending.lstrip("\n")
                if head.startswith(THINK_OPEN):
                    self.pending = head[len(THINK_OPEN) :]
                    self._switch("thought")
                    self.opened = False
                    continue
                if THINK_OPEN.startswith(head):  # could still become the opening tag
                    return out
                if self.state == "start":
                    self._switch("answer")
                self.opened = False
            if self.state == "answer":
                self._emit(ANSWER, self.pending, out)
                self.pending = ""
                return out
            cut = self.pending.find(THINK_CLOSE)
            if cut >= 0:
                self._emit(THOUGHT, self.pending[:cut].rstrip("\n"), out)
                self.pending = self.pending[cut + len(THINK_CLOSE) :]
                self._switch("answer")
                continue
            safe = len(self.pending) - held_back(self.pending, (THINK_CLOSE,))
            safe = len(self.pending[:safe].rstrip("\n"))  # trailing newlines: dropped if the thought closes next
            self._emit(THOUGHT, self.pending[:safe], out)
            self.pending = self.pending[safe:]
            return out

    def close(self) -> list[Part]:
        out: list[Part] = []
        rest, self.pending = self.pending, ""
        if self.state == "thought":
            self._emit(THOUGHT, rest.rstrip("\n"), out)
        elif rest:
            self._emit(ANSWER, rest, out)
        return out


class HarmonySplitter:
    """gpt-oss's channels (module docstring); fed the reply decoded with its special tokens."""

    def __init__(self) -> None:
        self.state = "header"  # header -> body -> header ... -> done
        self.kind = ANSWER
        self.pending = ""
        self.messages = 0  # message headers read

    def feed(self, text: str) -> list[Part]:
        self.pending += text
        out: list[Part] = []
        while self.state != "done":
            if self.state == "header":
                cut = self.pending.find(HARMONY_MESSAGE)
                if cut < 0:
                    return out
                header, self.pending = self.pending[:cut], self.pending[cut + len(HARMONY_MESSAGE) :]
                channel = header.split(HARMONY_CHANNEL, 1)[1] if HARMONY_CHANNEL in header else ""
                self.kind = THOUGHT if channel.split("<|", 1)[0].split(" ", 1)[0] == "analysis" else ANSWER
                self.state, self.messages = "body", self.messages + 1
                call = RECIPIENT.search(header)
                if call and self.kind == ANSWER:  # a tool call: its arguments follow the name (serve/toolcalls.py)
                    out.append((ANSWER, CALL_HEAD.format(name=call.group(1))))
                continue
            ends = [(i, m) for m in HARMONY_ENDS if (i := self.pending.find(m)) >= 0]
            if not ends:
                safe = len(self.pending) - held_back(self.pending, HARMONY_ENDS)
                if safe:
                    out.append((self.kind, self.pending[:safe]))
                self.pending = self.pending[safe:]
                return out
            cut, marker = min(ends)
            if cut:
                out.append((self.kind, self.pending[:cut]))
            self.pending = self.pending[cut + len(marker) :]
            self.state = "done" if marker in HARMONY_FINAL else "header"
        return out

    def close(self) -> list[Part]:
        """A reply whose first header never ended (no ``<|message|>``: not harmony) shows as its text, markers
        removed; a later header cut by ``max_new_tokens`` is dropped."""
        rest, self.pending = self.pending, ""
        if self.state == "header" and not self.messages:
            for marker in HARMONY_MARKERS:
                rest = rest.replace(marker, "")
            return [(ANSWER, rest)] if rest else []
        return [(self.kind, rest)] if rest and self.state == "body" else []


def keeps_markup(template: Any) -> bool:
    """Whether a reply must be decoded with its special tokens, for its splitter to read them (harmony)."""
    return isinstance(template, HarmonyTemplate)


def has_thought_markers(template: Any) -> bool:
    """Whether ``template`` writes thoughts a splitter separates (think blocks or harmony's analysis channel)."""
    if isinstance(template, JinjaTemplate):
        return THINK_CLOSE in str(getattr(template.tokenizer, "chat_template", ""))
    spec = getattr(template, "spec", None)
    return bool(getattr(spec, "reasoning", False))


def reply_splitter(template: Any, enable_thinking: bool = True) -> PlainSplitter | ThinkSplitter | HarmonySplitter:
    """The splitter of ``template``'s family, for a reply to a prompt rendered with ``enable_thinking``."""
    if isinstance(template, HarmonyTemplate):
        return HarmonySplitter()
    if not has_thought_markers(template):
        return PlainSplitter()
    if isinstance(template, JinjaTemplate):  # does its generation prompt open the thought?
        prompt = template.render_prompt([{"role": "user", "content": "?"}], None, None, enable_thinking)
        return ThinkSplitter(opened=prompt.rstrip("\n").endswith(THINK_OPEN))
    spec = template.spec
    return ThinkSplitter(opened=bool(spec.think_prompt) and enable_thinking)


def join_parts(parts: list[Part]) -> tuple[str, str]:
    """``(thought, answer)`` of a list of parts."""
    return "".join(t for k, t in parts if k == THOUGHT), "".join(t for k, t in parts if k == ANSWER)


def split_reply(template: Any, text: str, enable_thinking: bool = True) -> tuple[str, str]:
    """``(thought, answer)`` of a whole reply (the streamed split, fed in one piece)."""
    splitter = reply_splitter(template, enable_thinking)
    return join_parts(splitter.feed(text) + splitter.close())


#: what ``tunekit chat`` writes before a thought (dimmed as well on a terminal)
THOUGHT_LABEL = "Thinking: "
DIM, PLAIN = "\x1b[2m", "\x1b[0m"


def write_reply(parts: Iterable[Part], out: TextIO, dim: bool = False) -> tuple[str, str]:
    """Write a streamed reply as ``tunekit chat`` shows it: the thought after ``Thinking:`` (dimmed when ``dim``) on
    its own line, then the answer plain; returns ``(thought, answer)``."""
    thought = answer = ""
    for kind, text in parts:
        if kind == THOUGHT:
            if not thought:
                out.write((DIM if dim else "") + THOUGHT_LABEL)
            thought += text
        else:
            if thought and not answer:
                out.write((PLAIN if dim else "") + "\n")
            answer += text
        out.write(text)
        out.flush()
    if thought and not answer and dim:
        out.write(PLAIN)
    return thought, answer
