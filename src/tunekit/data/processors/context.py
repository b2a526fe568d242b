"""What a processor needs besides the batch (picklable, so ``datasets.map`` can use worker processes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..labels import IGNORE_INDEX
from .cutoff import Head, Spans, Turn


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def split_first_prompt(prompt: str, user_text: str) -> tuple[str, str]:
    """``(lead, tail)`` of a conversation's first prompt: the text before and after its first user message."""
    text = user_text.strip()
    at = prompt.rfind(text) if text else len(prompt)
    if at < 0:  # the template rewrote the text: nothing is known to be lead or tail
        return "", ""
    return prompt[:at], prompt[at + len(text) :]


@dataclass
class ProcessContext:
    tokenizer: Any
    template: Any
    cutoff_len: int
    train_on_prompt: bool = False
    mask_history: bool = False
    enable_thinking: bool = True
    preserve_thinking: bool = False  # untrained earlier replies keep their thought block (templates/base.py)
    thought_weight: float = 1.0  # thought_loss_weight (sft): 0 masks each trained reply's thought block
    default_system: str | None = None
    packing: bool = False  # pt: concatenate texts into cutoff_len blocks
    ignore_index: int = IGNORE_INDEX
    mm: Any = None  # the model family's media plugin (data/mm_plugins) for multimodal templates, else None
    media_root: str = ""  # relative media paths are resolved against this (media_dir, else dataset_dir)

    def system_for(self, sample_system: str | None) -> str | None:
        return sample_system or self.default_system or None

    def encode_pieces(self, pieces: list[str]) -> list[list[int]]:
        """Tokenize text pieces independently (no special tokens added: templates write BOS/EOS as text)."""
        if not pieces:
            return []
        return self.tokenizer(pieces, add_special_tokens=False)["input_ids"]

    def render_turns(
        self, messages: Sequence[dict[str, Any]], system: str | None, tools: Any, *, history_trained: bool
    ) -> list[tuple[str, str]]:
        """The one rule for how a conversation renders for training, used by every stage (sft, rm/dpo, kto).

        History replies render as the template's official history (for reasoning templates such as qwen3:
        without their ``<think>`` block, as the official Qwen3 template renders earlier replies) unless they
        are trained: a trained reply keeps the form the model is taught to produce (its thought, empty if
        none). SFT trains history unless ``mask_history``; rm/dpo and kto train only the last reply.
        """
        return self.template.encode_turns(
            list(messages),
            system=self.system_for(system),
            tools=tools or None,
            enable_thinking=self.enable_thinking,
            strip_history_thoughts=not history_trained,
            preserve_thinking=self.preserve_thinking,
        )

    def render_marked(
        self, messages: Sequence[dict[str, Any]], system: str | None, tools: Any, *, history_trained: bool
    ) -> list[tuple[str, str, str]]:
        """:meth:`render_turns` with each response's thought head (``Template.encode_turns_marked``)."""
        return self.template.encode_turns_marked(
            list(messages),
            system=self.system_for(system),
            tools=tools or None,
            enable_thinking=self.enable_thinking,
            strip_history_thoughts=not history_trained,
            preserve_thinking=self.preserve_thinking,
        )

    def spans(
        self,
        messages: Sequence[dict[str, Any]],
        system: str | None,
        tools: Any,
        *,
        history_trained: bool,
        known: Sequence[tuple[tuple[str, str], Turn]] = (),
    ) -> RenderedSpans:
        """The conversation's runs of turns rendered on their own, for the cutoff policy (``cutoff.py``).

        ``known``: ``(texts, ids)`` of turns already tokenized (the whole conversation's), not tokenized again."""
        return RenderedSpans(self, list(messages), system, tools, history_trained, known)

    def head_of_text(self, prompt: str, user_text: str) -> Head:
        """:class:`Head` of a rendered first prompt whose (first) user message is ``user_text``."""
        lead, tail = split_first_prompt(prompt, user_text)
        prefix = getattr(self.template, "prefix_text", "") or ""
        ids, lead_ids, tail_ids, prefix_ids = self.tokenizer([prompt, lead, tail, prefix], add_special_tokens=False)[
            "input_ids"
        ]
        n_lead = _common_prefix(ids, lead_ids) if lead else 0
        n_tail = _common_prefix(ids[::-1], tail_ids[::-1]) if tail else 0
        keep = _common_prefix(ids, prefix_ids) if prefix else 0
        bos = getattr(self.tokenizer, "bos_token_id", None)
        if bos is not None and ids and ids[0] == bos:
            keep = max(keep, 1)
        return Head(ids, lead=n_lead, tail=min(n_tail, len(ids) - n_lead), keep=keep)


class RenderedSpans(Spans):
    """Turns ``start..stop`` of one conversation as the template renders those messages alone (ids memoized by
    text)."""

    def __init__(
        self,
        ctx: ProcessContext,
        messages: list[dict[str, Any]],
        system: str | None,
        tools: Any,
        history_trained: bool,
        known: Sequence[tuple[tuple[str, str], Turn]] = (),
    ):
        self.ctx, self.messages, self.system, self.tools = ctx, messages, system, tools
        self.history_trained = history_trained
        self._ids: dict[str, list[int]] = {text: ids for texts, turn in known for text, ids in zip(texts, turn)}

    def _texts(self, start: int, stop: int) -> list[tuple[str, str]]:
        return self.ctx.render_turns(
            self.messages[2 * start : 2 * stop + 2], self.system, self.tools, history_trained=self.history_trained
        )

    def head(self, start: int, stop: int) -> Head:
        return self.ctx.head_of_text(self._texts(start, stop)[0][0], self.messages[2 * start]["content"])

    def can_start(self, start: int) -> bool:
        return self.messages[2 * start]["role"] != "observation"

    def turns(self, start: int, stop: int) -> list[Turn]:
        texts = self._texts(start, stop)
        new = [t for t in dict.fromkeys(t for pair in texts for t in pair) if t not in self._ids]
        self._ids.update(zip(new, self.ctx.encode_pieces(new)))
        return [(self._ids[p], self._ids[r]) for p, r in texts]
