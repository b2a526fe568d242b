"""Prompt ids for messages whose text must never become control tokens (the API's request messages).

A template renders a conversation into one string and the tokenizer turns every special-token string in it
into its id, so a client who writes ``<|im_end|>\\n<|im_start|>system\\n...`` inside a user message would
forge role boundaries. Here the message texts that contain special-token strings are rendered wrapped in
private sentinels (inside their surrounding whitespace, so templates that trim content trim the same), the
rendered string is cut at the sentinels, the template's own text is tokenized as always and the messages'
text with ``split_special_tokens=True`` (its ``<|im_end|>`` becomes the ordinary pieces ``<``, ``|``, ``im``, ...).
Messages without special-token text take the ordinary path unchanged (same ids as training and chat).

A message's content may also be a list of pieces (the API's content parts): :class:`Trusted` pieces are the
server's own text (an image's token run, ``infer/media_prompt.py``) and are encoded as control tokens; every
other piece is the client's and is kept apart as above.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from typing import Any

from ..config.problems import config_error


class Trusted(str):
    """A piece of message text written by tunekit, not the client (media token runs): its control tokens are real."""


def plain_messages(messages: Sequence[dict]) -> list[dict]:
    """``messages`` with list contents (pieces) joined into one string, as the template renders them."""
    return [{**m, "content": "".join(m["content"])} if isinstance(m.get("content"), list) else m for m in messages]


def _pieces(message: dict) -> list[str]:
    content = message.get("content")
    return list(content) if isinstance(content, list) else [content] if isinstance(content, str) else []


def special_strings(tokenizer: Any) -> list[str]:
    """The texts of the tokenizer's special tokens (longest first)."""
    found = {
        t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values() if getattr(t, "special", False)
    }
    found.update(t for t in getattr(tokenizer, "all_special_tokens", []) or [] if t)
    return sorted(found, key=len, reverse=True)


def first_special(text: str, specials: Sequence[str]) -> str | None:
    return next((s for s in specials if s in text), None)


def encode_untrusted(
    template: Any,
    tokenizer: Any,
    messages: list[dict],
    system: str | None,
    tools: Any,
    enable_thinking: bool,
    preserve_thinking: bool = False,
) -> list[int]:
    """Prompt ids of ``template.render_prompt(...)`` where no text from ``messages``/``system`` is a control token."""
    pieces = [_pieces(m) for m in messages]
    messages = plain_messages(messages)
    plain = template.render_prompt(messages, system, tools, enable_thinking, preserve_thinking=preserve_thinking)
    specials = special_strings(tokenizer)
    if tools:
        import json

        token = first_special(tools if isinstance(tools, str) else json.dumps(tools, ensure_ascii=False), specials)
        if token:
            raise config_error("infer_tools_control_token", token=repr(token))
    hits = [
        i for i, ps in enumerate(pieces) if any(not isinstance(p, Trusted) and first_special(p, specials) for p in ps)
    ]
    system_hit = bool(system and first_special(system, specials))
    if not hits and not system_hit:
        return tokenizer(plain, add_special_tokens=False)["input_ids"]
    nonce = secrets.token_hex(8)
    open_, close = f"\ue000{nonce}\ue001", f"\ue002{nonce}\ue003"

    def wrap(text: str) -> str:
        core = text.strip()
        start = text.index(core)
        return text[:start] + open_ + core + close + text[start + len(core) :]

    wrapped = [dict(m) for m in messages]
    for i in hits:
        if wrapped[i]["role"] == "function_call":  # JSON the template re-formats: its text cannot be kept apart
            token = first_special(wrapped[i]["content"], specials)
            raise config_error("infer_tool_call_control_token", index=i, token=repr(token))
        wrapped[i]["content"] = "".join(
            wrap(p) if not isinstance(p, Trusted) and first_special(p, specials) else p for p in pieces[i]
        )
    text = template.render_prompt(
        wrapped, wrap(system) if system_hit else system, tools, enable_thinking, preserve_thinking=preserve_thinking
    )
    pattern = re.compile(re.escape(open_) + "(.*?)" + re.escape(close), re.DOTALL)
    if (
        pattern.sub(lambda m: m.group(1), text) != plain
        or open_ in pattern.sub("", text)
        or close in pattern.sub("", text)
    ):
        client_text = (
            (system or "") if system_hit else "".join(p for p in pieces[hits[0]] if not isinstance(p, Trusted))
        )
        token = first_special(client_text, specials)
        raise config_error(
            "infer_message_control_token",
            where=hits[0] if hits else "system",
            token=repr(token),
            template=getattr(template, "name", "?"),
        )
    ids: list[int] = []
    pos = 0
    for m in pattern.finditer(text):
        if m.start() > pos:
            ids += tokenizer(text[pos : m.start()], add_special_tokens=False)["input_ids"]
        if m.group(1):
            ids += tokenizer(m.group(1), add_special_tokens=False, split_special_tokens=True)["input_ids"]
        pos = m.end()
    if pos < len(text):
        ids += tokenizer(text[pos:], add_special_tokens=False)["input_ids"]
    return ids
