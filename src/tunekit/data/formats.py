"""Convert raw records (alpaca, sharegpt, openai) into one canonical sample.

Canonical sample (what every stage's processor reads)::

    {"messages": [{"role": "user"|"assistant"|"function_call"|"observation", "content": str,
                   "reasoning": str}, ...],              # "reasoning" only on replies whose data separates it
     "system": str, "tools": str,                      # "" when absent
     "chosen": {"role", "content"[, "reasoning"]} | None,  # preference data (rm, dpo)
     "rejected": {"role", "content"} | None,
     "kto_tag": bool | None,                           # kto
     "text": str | None,                               # pt
     "images": [path, ...], "videos": [...], "audios": [...],  # as written in the record ([] if none)
     "_source": "file, record i"}

Messages alternate (user|observation) → (assistant|function_call). What a stage needs is checked here,
so a bad record is reported with its file and index instead of silently disappearing later.

A message ``content`` may be a string or a list of typed parts (:func:`_parts`):

- ``{"type": "text", "text": ...}`` (OpenAI) or ``{"type": "text", "value": ...}`` (LLaMA-Factory v1): text,
  joined without separator;
- ``{"type": "reasoning", "value": ...}`` (assistant only): the reply's thought, kept apart from its text in the
  message's ``reasoning`` key (as ``reasoning_content`` is), never joined into the text and parsed back: reasoning
  templates (qwen3) render it as their thinking block and keep the text whole, whatever ``<think>`` / ``</think>``
  it quotes (the official template's rule for ``reasoning_content``); a template without a thinking block writes
  it as a ``<think>\\n...\\n</think>\\n\\n`` block in front of the reply, as LLaMA-Factory does;
- ``{"type": "tool_call", "value": '{"name": ..., "arguments": ...}'}`` (assistant only): the reply becomes
  a ``function_call`` message (several calls: a JSON list), rendered in the template's tool-call format.

OpenAI assistant messages may instead carry ``tool_calls`` (and ``reasoning_content``). LLaMA-Factory v1
preference records (``chosen_messages`` / ``rejected_messages``: two whole conversations with the same
prompt) become one prompt with a chosen and a rejected reply. Media parts (``image_url``, ...) and unknown
part types are named errors, never dropped.

Media (``images`` / ``videos`` / ``audios`` columns, LLaMA-Factory's layout) are kept as path lists in
the sample under those keys; each needs one ``<image>`` / ``<video>`` / ``<audio>`` placeholder in the
text (counted here). Paths are resolved and files opened by the model family's plugin
(``data/mm_plugins``), which also refuses media for text-only models.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import DataError, RecordError
from .dataset_info import DatasetAttr
from .media_columns import MEDIA_PARTS, check_placeholders, media_columns, media_parts
from .readers import RawRecord

PROMPT_ROLES = ("user", "observation")
REPLY_ROLES = ("assistant", "function_call")
PART_TYPES = ("text", "reasoning", "tool_call")
V1_PAIR_KEYS = ("chosen_messages", "rejected_messages")
#: optional columns a file given by path (no dataset_info.json entry) is read with when its records have them
AUTO_COLUMNS = ("system", "tools", "history", "chosen", "rejected", "images", "videos", "audios")
#: characters one record may hold: 4 million is about a million tokens, beyond any model's context, and tokenizing
#: much more in one piece takes minutes and gigabytes (30 MB: 56 s, 5 GB with a tiny BPE) for a sample that is cut
MAX_RECORD_CHARS = 4_000_000


def guess_formatting(rec: dict[str, Any]) -> str:
    if "conversations" in rec or "messages" in rec or _is_v1_pair(rec):
        return "sharegpt"
    if "text" in rec and "instruction" not in rec:
        return "text"
    return "alpaca"


def convert_record(raw: RawRecord, attr: DatasetAttr, stage: str) -> dict[str, Any]:
    if raw.error is not None:  # the reader could not parse it (bad_records: skip)
        raise RecordError(raw.error)
    rec = raw.data
    if not isinstance(rec, dict):
        raise RecordError(f"{raw.where}: expected a JSON object, found {type(rec).__name__}.")
    formatting = attr.formatting
    if formatting == "auto":  # a file given by path: the format is guessed, its standard columns are used
        formatting = guess_formatting(rec)
        present = {key: key for key in AUTO_COLUMNS if key in rec}
        if formatting == "text":
            attr = DatasetAttr(**{**attr.__dict__, "columns": {**attr.columns, **present, "prompt": "text"}})
            formatting = "alpaca"
        elif formatting == "sharegpt":
            key = "conversations" if "conversations" in rec else "messages"
            role_key = "role" if _first_msg_has(rec.get(key, rec.get(V1_PAIR_KEYS[0])), "role") else "from"
            from .dataset_info import OPENAI_TAGS, SHAREGPT_COLUMNS, SHAREGPT_TAGS

            present.pop("history", None)
            attr = DatasetAttr(
                **{
                    **attr.__dict__,
                    "columns": {**SHAREGPT_COLUMNS, **present, "messages": key},
                    "tags": dict(OPENAI_TAGS if role_key == "role" else SHAREGPT_TAGS),
                }
            )
        else:
            attr = DatasetAttr(**{**attr.__dict__, "columns": {**attr.columns, **present}})
    raw, media = media_parts(raw, attr, media_columns(raw, attr))
    if formatting == "alpaca":
        sample = _from_alpaca(raw, attr, stage)
    elif attr.column("messages") not in rec and _is_v1_pair(rec):
        sample = _from_v1_pair(raw, attr, stage)
    else:
        sample = _from_sharegpt(raw, attr, stage)
    sample["_source"] = raw.where
    _check_size(sample, raw)
    sample.update(media)
    check_placeholders(sample, raw, stage)
    return _check_for_stage(sample, raw, attr, stage)


def _check_size(sample: dict[str, Any], raw: RawRecord) -> None:
    """Refuse a record too large to be one sample (see ``MAX_RECORD_CHARS``), or holding text that is not Unicode (a
    lone surrogate such as JSON's ``"\\ud800"``: no tokenizer can encode it), before it reaches the tokenizer."""

    def chars(value: Any) -> int:
        if isinstance(value, str):
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise RecordError(
                        f"{raw.where}: after {value[max(exc.start - 20, 0) : exc.start]!r} the text holds "
                        f"U+{ord(value[exc.start]):04X}, half of a UTF-16 surrogate pair (a lone '\\u"
                        f"{ord(value[exc.start]):04x}' escape), no character: fix or remove it."
                    ) from None
            return len(value)
        if isinstance(value, dict):
            return sum(chars(v) for k, v in value.items() if k != "role")
        if isinstance(value, list):
            return sum(chars(v) for v in value)
        return 0

    size = chars({k: v for k, v in sample.items() if k != "_source"})
    if size > MAX_RECORD_CHARS:
        raise RecordError(
            f"{raw.where}: the record holds {size:,} characters of text, more than one sample can use "
            f"(limit {MAX_RECORD_CHARS:,}, about a million tokens); split it into several records."
        )


def _is_v1_pair(rec: dict[str, Any]) -> bool:
    return all(isinstance(rec.get(k), list) for k in V1_PAIR_KEYS)


def _first_msg_has(messages: Any, key: str) -> bool:
    return isinstance(messages, list) and bool(messages) and isinstance(messages[0], dict) and key in messages[0]


def _text(value: Any, raw: RawRecord, what: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, list):
        text, reasoning, calls = _parts(value, raw, what)
        if reasoning is not None or calls:
            kind = "reasoning" if reasoning is not None else "tool_call"
            raise RecordError(
                f"{raw.where}: {what} has a '{kind}' part; reasoning and tool_call parts belong to "
                f"assistant messages only."
            )
        return text
    raise RecordError(f"{raw.where}: {what} must be text, found {type(value).__name__}.")


def _parts(value: Any, raw: RawRecord, what: str) -> tuple[str, str | None, list[Any]]:
    """(text, reasoning or None, tool calls) of a content given as typed parts (see the module docstring)."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[Any] = []
    for j, part in enumerate(value):
        where = f"{raw.where}: {what}, part {j}"
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            raise RecordError(
                f"{where} must be an object with a 'type' ({', '.join(PART_TYPES)}), found {str(part)[:120]!r}."
            )
        if kind in MEDIA_PARTS:
            raise RecordError(
                f"{where} is '{kind}': {MEDIA_PARTS[kind]} are not supported yet (tunekit trains on "
                f"text only). Remove the part, or the record, to train on the text."
            )
        if kind not in PART_TYPES:
            raise RecordError(
                f"{where} has unknown type '{kind}'; supported part types: {', '.join(PART_TYPES)} "
                f"(and OpenAI's 'text' parts with a 'text' key)."
            )
        # OpenAI keys text parts 'text', LLaMA-Factory v1 'value' (a hub dataset's Arrow rows carry both, one None)
        key = "text" if kind == "text" and isinstance(part.get("text"), str) else "value"
        body = part.get(key)
        if kind == "tool_call":
            calls.append(_tool_call(body, where))
            continue
        if not isinstance(body, str):
            raise RecordError(f"{where} ('{kind}') needs a string '{key}', found {type(body).__name__}.")
        (texts if kind == "text" else thoughts).append(body)
    return "".join(texts), ("".join(thoughts) if thoughts else None), calls


def _tool_call(body: Any, where: str) -> dict[str, Any]:
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except json.JSONDecodeError as exc:
            raise RecordError(f"{where} ('tool_call') is not valid JSON ({exc.msg}): {body[:200]!r}.") from None
    if not isinstance(body, dict) or "name" not in body or "arguments" not in body:
        raise RecordError(
            f"{where} ('tool_call') must be an object with 'name' and 'arguments', found {str(body)[:200]!r}."
        )
    return {"name": body["name"], "arguments": body["arguments"]}


def _reply_message(
    value: Any, raw: RawRecord, what: str, extra_calls: list[Any] | None = None, extra_reasoning: str | None = None
) -> dict[str, str]:
    """The canonical message of an assistant reply whose content may hold reasoning / tool_call parts.

    The reasoning the data separates (``reasoning`` parts, ``reasoning_content``) stays in its own ``reasoning``
    key and the text stays whole: the template renders the two (``templates/base.py``), nothing re-parses text.
    """
    if isinstance(value, list):
        text, reasoning, calls = _parts(value, raw, what)
    else:
        text, reasoning, calls = _text(value, raw, what), None, []
    calls = calls + list(extra_calls or [])
    if extra_reasoning is not None:
        reasoning = (reasoning or "") + extra_reasoning
    thought = {} if reasoning is None else {"reasoning": reasoning}
    if not calls:
        return {"role": "assistant", "content": text, **thought}
    if text.strip():
        raise RecordError(
            f"{raw.where}: {what} has both text and tool calls; tunekit renders a tool-call reply as the "
            f"calls alone (and its reasoning). Move the text into its own assistant message, or drop it."
        )
    return {
        "role": "function_call",
        "content": json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False),
        **thought,
    }


def reply_text(message: dict[str, Any]) -> str:
    """A reply as one plain text (stage pt): its separated reasoning as a ``<think>`` block in front of its text."""
    reasoning = message.get("reasoning")
    thought = "<think>\n" + reasoning.strip("\n") + "\n</think>\n\n" if reasoning and reasoning.strip() else ""
    return thought + message["content"]


def is_empty_reply(message: dict[str, Any]) -> bool:
    """No text and no reasoning (a reply with only a thought still trains its thinking block)."""
    return not message["content"].strip() and not (message.get("reasoning") or "").strip()


def _openai_extras(msg: dict[str, Any], raw: RawRecord, what: str) -> tuple[list[Any], str | None]:
    """OpenAI-style ``tool_calls`` and ``reasoning_content`` fields of an assistant message."""
    calls = []
    tool_calls = msg.get("tool_calls")
    if tool_calls:
        if not isinstance(tool_calls, list):
            raise RecordError(f"{raw.where}: {what} 'tool_calls' must be a list, found {type(tool_calls).__name__}.")
        for j, call in enumerate(tool_calls):
            fn = call.get("function", call) if isinstance(call, dict) else call
            calls.append(_tool_call(fn, f"{raw.where}: {what}, tool_calls[{j}]"))
    reasoning = msg.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        raise RecordError(f"{raw.where}: {what} 'reasoning_content' must be text, found {type(reasoning).__name__}.")
    return calls, reasoning


def _tools(value: Any, raw: RawRecord) -> str:
    """The record's tool list as JSON text, checked here where the record is known (the template parses it later)."""
    from .templates.tools import parse_tools

    try:
        parse_tools(value)
    except DataError as exc:
        raise RecordError(f"{raw.where}: {exc}; the tools column holds a JSON list of function definitions.") from None
    return (
        ""
        if value is None or value == ""
        else value
        if isinstance(value, str)
        else json.dumps(value, ensure_ascii=False)
    )


def _get(raw: RawRecord, attr: DatasetAttr, key: str, required: bool = False) -> Any:
    col = attr.column(key)
    if col is None:
        return None
    if col not in raw.data:
        if required:
            present = ", ".join(sorted(map(str, raw.data))) or "none"
            raise RecordError(
                f"{raw.where}: missing column '{col}' ({key}); the record has: {present}. "
                f"Fix the record or map the column in dataset_info.json 'columns' of '{attr.name}'."
            )
        return None
    return raw.data[col]


def _from_alpaca(raw: RawRecord, attr: DatasetAttr, stage: str) -> dict[str, Any]:
    messages: list[dict[str, str]] = []
    history = _get(raw, attr, "history")
    if history:
        if not isinstance(history, list) or not all(isinstance(t, (list, tuple)) and len(t) == 2 for t in history):
            raise RecordError(f"{raw.where}: history must be a list of [question, answer] pairs.")
        for q, a in history:
            messages.append({"role": "user", "content": _text(q, raw, "history question")})
            messages.append({"role": "assistant", "content": _text(a, raw, "history answer")})
    _suggest_sharegpt(raw, attr)
    prompt = _text(_get(raw, attr, "prompt", required=True), raw, f"'{attr.column('prompt')}'")
    query = _text(_get(raw, attr, "query"), raw, f"'{attr.column('query')}'")
    content = "\n".join(p for p in (prompt, query) if p)
    messages.append({"role": "user", "content": content})
    sample: dict[str, Any] = {
        "system": _text(_get(raw, attr, "system"), raw, "system"),
        "tools": _tools(_get(raw, attr, "tools"), raw),
        "chosen": None,
        "rejected": None,
        "kto_tag": None,
        "text": None,
    }
    if stage == "pt":
        sample["text"] = content
        sample["messages"] = []
        return sample
    chosen, rejected = _get(raw, attr, "chosen"), _get(raw, attr, "rejected")
    response = _get(raw, attr, "response", required=stage in ("sft", "kto") and chosen is None)
    if attr.ranking or chosen is not None:
        if chosen is None and isinstance(response, list) and len(response) >= 2:
            chosen, rejected = response[0], response[1]
        if chosen is None or rejected is None:
            raise RecordError(
                f"{raw.where}: preference data needs both chosen and rejected answers "
                f"(columns '{attr.column('chosen') or 'chosen'}' and '{attr.column('rejected') or 'rejected'}')."
            )
        sample["chosen"] = {"role": "assistant", "content": _text(chosen, raw, "chosen")}
        sample["rejected"] = {"role": "assistant", "content": _text(rejected, raw, "rejected")}
    elif response is not None:
        messages.append({"role": "assistant", "content": _text(response, raw, f"'{attr.column('response')}'")})
    kto = _get(raw, attr, "kto_tag")
    if kto is not None:
        sample["kto_tag"] = _as_bool(kto, raw)
    sample["messages"] = messages
    return sample


def _suggest_sharegpt(raw: RawRecord, attr: DatasetAttr) -> None:
    """A conversation list read as alpaca (the default formatting): name the formatting the entry needs."""
    prompt_col = attr.column("prompt")
    if prompt_col in raw.data or attr.formatting != "alpaca":
        return
    key = next((k for k in ("conversations", "messages", *V1_PAIR_KEYS) if isinstance(raw.data.get(k), list)), None)
    if key is None:
        return
    first = raw.data[key][0] if raw.data[key] else None
    openai_style = isinstance(first, dict) and "role" in first
    sharegpt_cols = "" if key in ("conversations", *V1_PAIR_KEYS) else f' with "columns": {{"messages": "{key}"}}'
    if openai_style:
        openai_cols = "" if key in ("messages", *V1_PAIR_KEYS) else f' with "columns": {{"messages": "{key}"}}'
        joiner = " and " if sharegpt_cols else " with "
        fix = (
            f'"formatting": "openai"{openai_cols} (or "formatting": "sharegpt"{sharegpt_cols}{joiner}'
            f"{_OPENAI_TAGS_HINT})"
        )
    else:
        fix = f'"formatting": "sharegpt"{sharegpt_cols}'
    raise RecordError(
        f"{raw.where}: the record holds '{key}', a list of messages (sharegpt-style data), but the "
        f"dataset_info.json entry '{attr.name}' reads it as alpaca (the default formatting), which needs "
        f"'{prompt_col}'. Add {fix} to the entry '{attr.name}'."
    )


def _as_bool(value: Any, raw: RawRecord) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if value in (0, 1):
        return bool(value)
    raise RecordError(f"{raw.where}: kto_tag must be true or false, found {value!r}.")


def _messages(convo: Any, raw: RawRecord, attr: DatasetAttr, column: str) -> tuple[str | None, list[dict[str, str]]]:
    """(system or None, alternating canonical messages) of one conversation list."""
    tags = attr.tags
    if not isinstance(convo, list) or not convo:
        raise RecordError(f"{raw.where}: '{column}' must be a non-empty list of messages.")
    role_map = {
        tags["user_tag"]: "user",
        tags["assistant_tag"]: "assistant",
        tags["observation_tag"]: "observation",
        tags["function_tag"]: "function_call",
        tags["system_tag"]: "system",
    }
    system = None
    messages: list[dict[str, str]] = []
    for i, msg in enumerate(convo):
        if not isinstance(msg, dict) or tags["role_tag"] not in msg or tags["content_tag"] not in msg:
            raise RecordError(
                f"{raw.where}: message {i} must be an object with '{tags['role_tag']}' and "
                f"'{tags['content_tag']}'.{_tags_hint(msg, attr)}"
            )
        tag = msg[tags["role_tag"]]
        if tag not in role_map:
            raise RecordError(
                f"{raw.where}: message {i} has unknown role '{tag}'; expected one of {', '.join(role_map)} "
                f"(set 'tags' in dataset_info.json entry '{attr.name}' to map other names)."
            )
        role = role_map[tag]
        what = f"message {i} content"
        thought: dict[str, str] = {}
        if role in REPLY_ROLES:
            calls, reasoning = _openai_extras(msg, raw, f"message {i}") if tags["role_tag"] == "role" else ([], None)
            reply = _reply_message(msg[tags["content_tag"]], raw, what, calls, reasoning)
            role = "function_call" if role == "function_call" else reply["role"]
            content, thought = reply["content"], ({"reasoning": reply["reasoning"]} if "reasoning" in reply else {})
        else:
            content = _text(msg[tags["content_tag"]], raw, what)
        _check_loss_weight(msg, role, raw, i)
        if role == "system":
            if i != 0:
                raise RecordError(f"{raw.where}: message {i} is a system message; only the first message may be one.")
            system = content
            continue
        expect = PROMPT_ROLES if len(messages) % 2 == 0 else REPLY_ROLES
        if role not in expect:
            want = "a user/observation message" if expect is PROMPT_ROLES else "an assistant/function_call reply"
            hint = ""
            if role == "observation" and messages and messages[-1]["role"] == "observation":
                hint = (
                    " Several tool results in a row: put them in one tool message (e.g. a JSON list of the results), "
                    "as LLaMA-Factory's tool-use data does."
                )
            raise RecordError(
                f"{raw.where}: message {i} has role '{tag}' where {want} is expected; "
                f"conversations must alternate user → assistant.{hint}"
            )
        messages.append({"role": role, "content": content, **thought})
    return system, messages


def _tags_hint(msg: Any, attr: DatasetAttr) -> str:
    if isinstance(msg, dict) and "role" in msg and "content" in msg and attr.tags.get("role_tag") != "role":
        return (
            f" This message has 'role'/'content' (OpenAI style): add \"formatting\": \"openai\" to the dataset_info.json "
            f"entry '{attr.name}', or the sharegpt tags {_OPENAI_TAGS_HINT}."
        )
    return ""


_OPENAI_TAGS_HINT = (
    '"tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", '
    '"assistant_tag": "assistant", "system_tag": "system"}'
)


def _check_loss_weight(msg: dict[str, Any], role: str, raw: RawRecord, i: int) -> None:
    """LLaMA-Factory v1's per-message ``loss_weight``: only the weights tunekit trains with are accepted."""
    weight = msg.get("loss_weight")
    if weight is None:
        return
    expected = 1.0 if role in REPLY_ROLES else 0.0
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or float(weight) != expected:
        raise RecordError(
            f"{raw.where}: message {i} ({role}) has loss_weight {weight!r}; tunekit trains every reply "
            f"with weight 1.0 and no other message (0.0), other per-message weights are not supported "
            f"(yet). Remove the key, or use mask_history: true to train only the last reply."
        )


def _from_sharegpt(raw: RawRecord, attr: DatasetAttr, stage: str) -> dict[str, Any]:
    system, messages = _messages(_get(raw, attr, "messages", required=True), raw, attr, attr.column("messages"))
    if system is None:
        system = _text(_get(raw, attr, "system"), raw, "system")
    sample: dict[str, Any] = {
        "messages": messages,
        "system": system,
        "tools": _tools(_get(raw, attr, "tools"), raw),
        "chosen": None,
        "rejected": None,
        "kto_tag": None,
        "text": None,
    }
    chosen, rejected = _get(raw, attr, "chosen"), _get(raw, attr, "rejected")
    if attr.ranking or chosen is not None:
        if chosen is None or rejected is None:
            raise RecordError(
                f"{raw.where}: preference data needs both '{attr.column('chosen') or 'chosen'}' and "
                f"'{attr.column('rejected') or 'rejected'}' messages."
            )
        sample["chosen"] = _reply(chosen, raw, attr, "chosen")
        sample["rejected"] = _reply(rejected, raw, attr, "rejected")
    kto = _get(raw, attr, "kto_tag")
    if kto is not None:
        sample["kto_tag"] = _as_bool(kto, raw)
    if stage == "pt":
        sample["text"] = "\n".join(reply_text(m) for m in messages)
    return sample


def _from_v1_pair(raw: RawRecord, attr: DatasetAttr, stage: str) -> dict[str, Any]:
    """LLaMA-Factory v1 pairs: two whole conversations that differ only in the last reply."""
    sides = [_messages(raw.data[key], raw, attr, key) for key in V1_PAIR_KEYS]
    (sys_c, chosen), (sys_r, rejected) = sides
    for key, msgs in zip(V1_PAIR_KEYS, (chosen, rejected)):
        if msgs[-1]["role"] not in REPLY_ROLES:
            raise RecordError(
                f"{raw.where}: '{key}' must end with the assistant's reply, found a {msgs[-1]['role']} message."
            )
    if sys_c != sys_r or chosen[:-1] != rejected[:-1]:
        k = next(
            (k for k, (a, b) in enumerate(zip(chosen[:-1], rejected[:-1])) if a != b),
            min(len(chosen), len(rejected)) - 1,
        )
        where = "the system message" if sys_c != sys_r else f"message {k + (sys_c is not None)}"
        raise RecordError(
            f"{raw.where}: chosen_messages and rejected_messages must share the conversation before the "
            f"last reply; they differ at {where}."
        )
    system = sys_c if sys_c is not None else _text(_get(raw, attr, "system"), raw, "system")
    sample: dict[str, Any] = {
        "messages": chosen[:-1],
        "system": system,
        "tools": _tools(_get(raw, attr, "tools"), raw),
        "chosen": chosen[-1],
        "rejected": rejected[-1],
        "kto_tag": None,
        "text": None,
    }
    if stage == "pt":
        sample["text"] = "\n".join(reply_text(m) for m in chosen)
    return sample


def _reply(value: Any, raw: RawRecord, attr: DatasetAttr, what: str) -> dict[str, str]:
    tags = attr.tags
    if isinstance(value, dict):
        tag = value.get(tags["role_tag"], tags["assistant_tag"])
        role = {tags["assistant_tag"]: "assistant", tags["function_tag"]: "function_call"}.get(tag)
        if role is None:
            raise RecordError(
                f"{raw.where}: {what} must be an assistant or function_call message, found role '{tag}'."
            )
        calls, reasoning = _openai_extras(value, raw, what) if tags["role_tag"] == "role" else ([], None)
        reply = _reply_message(value.get(tags["content_tag"]), raw, what, calls, reasoning)
        return {**reply, "role": "function_call" if role == "function_call" else reply["role"]}
    return _reply_message(value, raw, what)


def _check_for_stage(sample: dict[str, Any], raw: RawRecord, attr: DatasetAttr, stage: str) -> dict[str, Any]:
    msgs = sample["messages"]
    if stage == "pt":
        if not (sample.get("text") or "").strip():
            raise RecordError(f"{raw.where}: empty text.")
        return sample
    if not msgs:
        raise RecordError(f"{raw.where}: no messages.")
    if stage in ("rm", "dpo"):
        if sample["chosen"] is None:
            raise RecordError(
                f'{raw.where}: stage {stage} needs preference data (chosen/rejected); set "ranking": true '
                f"in the dataset_info.json entry '{attr.name}' and map its columns."
            )
        if msgs[-1]["role"] not in PROMPT_ROLES:
            raise RecordError(f"{raw.where}: the conversation before chosen/rejected must end with a user message.")
        # an empty or identical answer is dropped (and counted) by the pairwise processor
        return sample
    if stage in ("ppo", "grpo"):
        if msgs[-1]["role"] in REPLY_ROLES:  # keep the reference answer for reward functions
            sample["chosen"] = msgs[-1]
            sample["messages"] = msgs[:-1]
        return sample
    # sft, kto: must end with a non-empty reply
    if msgs[-1]["role"] not in REPLY_ROLES:
        raise RecordError(
            f"{raw.where}: the conversation ends with a {msgs[-1]['role']} message; "
            f"{stage} needs it to end with the assistant's reply."
        )
    for i, m in enumerate(msgs):
        if m["role"] in REPLY_ROLES and is_empty_reply(m):
            raise RecordError(
                f"{raw.where}: assistant turn {i // 2} is empty; remove the record or fill in the answer."
            )
    if stage == "kto" and sample["kto_tag"] is None:
        raise RecordError(
            f"{raw.where}: kto needs a desirable/undesirable label; map it with columns.kto_tag in '{attr.name}'."
        )
    if not msgs[0]["content"].strip() and len(msgs) == 2:
        raise RecordError(f"{raw.where}: the prompt is empty.")
    return sample
