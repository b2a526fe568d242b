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

A message ``content`` may be a string or a list of typed parts (text, reasoning, tool_call; OpenAI assistant
messages may instead carry ``tool_calls`` and ``reasoning_content``): ``message_content.py``. LLaMA-Factory v1
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
from functools import lru_cache
from typing import Any

from ..config.problems import Said, message_of
from ..errors import DataError, RecordError
from .dataset_info import OPENAI_TAGS, SHAREGPT_COLUMNS, SHAREGPT_TAGS, DatasetAttr
from .media_columns import check_placeholders, media_columns, media_parts
from .message_content import content_text, is_empty_reply, openai_extras, reply_message, reply_text
from .readers import RawRecord
from .templates.tools import parse_tools

PROMPT_ROLES = ("user", "observation")
REPLY_ROLES = ("assistant", "function_call")
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
        raise RecordError(Said("record_not_object", where=raw.where, type=type(rec).__name__))
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
    sample["_source"] = raw.source
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
                    before, code = repr(value[max(exc.start - 20, 0) : exc.start]), ord(value[exc.start])
                    raise RecordError(
                        Said("record_lone_surrogate", where=raw.where, before=before, code=code)
                    ) from None
            return len(value)
        if isinstance(value, dict):
            return sum(chars(v) for k, v in value.items() if k != "role")
        if isinstance(value, list):
            return sum(chars(v) for v in value)
        return 0

    size = chars({k: v for k, v in sample.items() if k != "_source"})
    if size > MAX_RECORD_CHARS:
        raise RecordError(Said("record_too_large", where=raw.where, size=size, limit=MAX_RECORD_CHARS))


def _is_v1_pair(rec: dict[str, Any]) -> bool:
    return all(isinstance(rec.get(k), list) for k in V1_PAIR_KEYS)


def _first_msg_has(messages: Any, key: str) -> bool:
    return isinstance(messages, list) and bool(messages) and isinstance(messages[0], dict) and key in messages[0]


def _tools(value: Any, raw: RawRecord) -> str:
    """The record's tool list as JSON text, checked here where the record is known (the template parses it later)."""
    try:
        parse_tools(value)
    except DataError as exc:
        raise RecordError(Said("record_bad_tools", where=raw.where, error=message_of(exc))) from None
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
            present = ", ".join(sorted(map(str, raw.data))) or Said("part_no_columns")
            raise RecordError(
                Said("record_missing_column", where=raw.where, column=col, key=key, present=present, name=attr.name)
            )
        return None
    return raw.data[col]


def _from_alpaca(raw: RawRecord, attr: DatasetAttr, stage: str) -> dict[str, Any]:
    messages: list[dict[str, str]] = []
    history = _get(raw, attr, "history")
    if history:
        if not isinstance(history, list) or not all(isinstance(t, (list, tuple)) and len(t) == 2 for t in history):
            raise RecordError(Said("record_history_pairs", where=raw.where))
        for q, a in history:
            messages.append({"role": "user", "content": content_text(q, raw, _what("part_what_history_question"))})
            messages.append({"role": "assistant", "content": content_text(a, raw, _what("part_what_history_answer"))})
    _suggest_sharegpt(raw, attr)
    prompt = content_text(_get(raw, attr, "prompt", required=True), raw, f"'{attr.column('prompt')}'")
    query = content_text(_get(raw, attr, "query"), raw, f"'{attr.column('query')}'")
    content = "\n".join(p for p in (prompt, query) if p)
    messages.append({"role": "user", "content": content})
    sample: dict[str, Any] = {
        "system": content_text(_get(raw, attr, "system"), raw, "system"),
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
            chosen_col, rejected_col = attr.column("chosen") or "chosen", attr.column("rejected") or "rejected"
            raise RecordError(
                Said("record_preference_answers", where=raw.where, chosen=chosen_col, rejected=rejected_col)
            )
        sample["chosen"] = {"role": "assistant", "content": content_text(chosen, raw, "chosen")}
        sample["rejected"] = {"role": "assistant", "content": content_text(rejected, raw, "rejected")}
    elif response is not None:
        messages.append({"role": "assistant", "content": content_text(response, raw, f"'{attr.column('response')}'")})
    kto = _get(raw, attr, "kto_tag")
    if kto is not None:
        sample["kto_tag"] = _as_bool(kto, raw)
    sample["messages"] = messages
    return sample


@lru_cache(maxsize=1024)
def _what(key: str, index: int | None = None) -> Said:
    """A part of a record named in its errors (``message 3 content``): made once per key and position, not for each
    record (a keyed message costs microseconds to make)."""
    return Said(key) if index is None else Said(key, index=index)


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
    with_key = Said("part_with_columns", key=key)
    sharegpt_cols = None if key in ("conversations", *V1_PAIR_KEYS) else with_key
    if openai_style:
        openai_cols = None if key in ("messages", *V1_PAIR_KEYS) else with_key
        if sharegpt_cols is None:
            fix = Said("part_fix_openai_with_tags", openai_columns=openai_cols, tags=_OPENAI_TAGS_HINT)
        else:
            fix = Said(
                "part_fix_openai_and_tags", openai_columns=openai_cols, columns=sharegpt_cols, tags=_OPENAI_TAGS_HINT
            )
    else:
        fix = Said("part_fix_sharegpt", columns=sharegpt_cols)
    raise RecordError(
        Said("record_sharegpt_as_alpaca", where=raw.where, key=key, name=attr.name, prompt=str(prompt_col), fix=fix)
    )


def _as_bool(value: Any, raw: RawRecord) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if value in (0, 1):
        return bool(value)
    raise RecordError(Said("record_kto_tag", where=raw.where, value=repr(value)))


def _messages(convo: Any, raw: RawRecord, attr: DatasetAttr, column: str) -> tuple[str | None, list[dict[str, str]]]:
    """(system or None, alternating canonical messages) of one conversation list."""
    tags = attr.tags
    if not isinstance(convo, list) or not convo:
        raise RecordError(Said("record_messages_not_list", where=raw.where, column=column))
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
            role_tag, content_tag, hint = tags["role_tag"], tags["content_tag"], _tags_hint(msg, attr)
            raise RecordError(
                Said(
                    "record_message_not_object",
                    where=raw.where,
                    index=i,
                    role_tag=role_tag,
                    content_tag=content_tag,
                    hint=hint,
                )
            )
        tag = msg[tags["role_tag"]]
        if tag not in role_map:
            roles = ", ".join(role_map)
            raise RecordError(
                Said("record_unknown_role", where=raw.where, index=i, tag=str(tag), roles=roles, name=attr.name)
            )
        role = role_map[tag]
        what = _what("part_what_message_content", i)
        thought: dict[str, str] = {}
        if role in REPLY_ROLES:
            calls, reasoning = (
                openai_extras(msg, raw, _what("part_what_message", i)) if tags["role_tag"] == "role" else ([], None)
            )
            reply = reply_message(msg[tags["content_tag"]], raw, what, calls, reasoning)
            role = "function_call" if role == "function_call" else reply["role"]
            content, thought = reply["content"], ({"reasoning": reply["reasoning"]} if "reasoning" in reply else {})
        else:
            content = content_text(msg[tags["content_tag"]], raw, what)
        _check_loss_weight(msg, role, raw, i)
        if role == "system":
            if i != 0:
                raise RecordError(Said("record_late_system", where=raw.where, index=i))
            system = content
            continue
        expect = PROMPT_ROLES if len(messages) % 2 == 0 else REPLY_ROLES
        if role not in expect:
            want = Said("part_want_prompt" if expect is PROMPT_ROLES else "part_want_reply")
            hint = None
            if role == "observation" and messages and messages[-1]["role"] == "observation":
                hint = Said("part_tool_results_in_a_row")
            raise RecordError(Said("record_role_order", where=raw.where, index=i, tag=str(tag), want=want, hint=hint))
        messages.append({"role": role, "content": content, **thought})
    return system, messages


def _tags_hint(msg: Any, attr: DatasetAttr) -> Said | None:
    if isinstance(msg, dict) and "role" in msg and "content" in msg and attr.tags.get("role_tag") != "role":
        return Said("part_openai_style_hint", name=attr.name, tags=_OPENAI_TAGS_HINT)
    return None


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
        raise RecordError(Said("record_loss_weight", where=raw.where, index=i, role=role, weight=repr(weight)))


def _from_sharegpt(raw: RawRecord, attr: DatasetAttr, stage: str) -> dict[str, Any]:
    system, messages = _messages(_get(raw, attr, "messages", required=True), raw, attr, attr.column("messages"))
    if system is None:
        system = content_text(_get(raw, attr, "system"), raw, "system")
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
            chosen_col, rejected_col = attr.column("chosen") or "chosen", attr.column("rejected") or "rejected"
            raise RecordError(
                Said("record_preference_messages", where=raw.where, chosen=chosen_col, rejected=rejected_col)
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
            raise RecordError(Said("record_v1_pair_end", where=raw.where, key=key, role=msgs[-1]["role"]))
    if sys_c != sys_r or chosen[:-1] != rejected[:-1]:
        k = next(
            (k for k, (a, b) in enumerate(zip(chosen[:-1], rejected[:-1])) if a != b),
            min(len(chosen), len(rejected)) - 1,
        )
        at = (
            Said("part_the_system_message")
            if sys_c != sys_r
            else Said("part_what_message", index=k + (sys_c is not None))
        )
        raise RecordError(Said("record_v1_pair_differ", where=raw.where, at=at))
    system = sys_c if sys_c is not None else content_text(_get(raw, attr, "system"), raw, "system")
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
            raise RecordError(Said("record_reply_role", where=raw.where, what=what, tag=str(tag)))
        calls, reasoning = openai_extras(value, raw, what) if tags["role_tag"] == "role" else ([], None)
        reply = reply_message(value.get(tags["content_tag"]), raw, what, calls, reasoning)
        return {**reply, "role": "function_call" if role == "function_call" else reply["role"]}
    return reply_message(value, raw, what)


def _check_for_stage(sample: dict[str, Any], raw: RawRecord, attr: DatasetAttr, stage: str) -> dict[str, Any]:
    msgs = sample["messages"]
    if stage == "pt":
        if not (sample.get("text") or "").strip():
            raise RecordError(Said("record_empty_text", where=raw.where))
        return sample
    if not msgs:
        raise RecordError(Said("record_no_messages", where=raw.where))
    if stage in ("rm", "dpo"):
        if sample["chosen"] is None:
            raise RecordError(Said("record_stage_needs_preference", where=raw.where, stage=stage, name=attr.name))
        if msgs[-1]["role"] not in PROMPT_ROLES:
            raise RecordError(Said("record_pair_prompt_end", where=raw.where))
        # an empty or identical answer is dropped (and counted) by the pairwise processor
        return sample
    if stage in ("ppo", "grpo"):
        if msgs[-1]["role"] in REPLY_ROLES:  # keep the reference answer for reward functions
            sample["chosen"] = msgs[-1]
            sample["messages"] = msgs[:-1]
        return sample
    # sft, kto: must end with a non-empty reply
    if msgs[-1]["role"] not in REPLY_ROLES:
        raise RecordError(Said("record_ends_with", where=raw.where, role=msgs[-1]["role"], stage=stage))
    for i, m in enumerate(msgs):
        if m["role"] in REPLY_ROLES and is_empty_reply(m):
            raise RecordError(Said("record_empty_reply", where=raw.where, turn=i // 2))
    if stage == "kto" and sample["kto_tag"] is None:
        raise RecordError(Said("record_kto_needs_label", where=raw.where, name=attr.name))
    if not msgs[0]["content"].strip() and len(msgs) == 2:
        raise RecordError(Said("record_empty_prompt", where=raw.where))
    return sample
