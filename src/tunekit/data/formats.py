"""Convert raw records (alpaca, sharegpt, openai) into one canonical sample.

Canonical sample (what every stage's processor reads)::

    {"messages": [{"role": "user"|"assistant"|"function_call"|"observation", "content": str}, ...],
     "system": str, "tools": str,                      # "" when absent
     "chosen": {"role", "content"} | None,             # preference data (rm, dpo)
     "rejected": {"role", "content"} | None,
     "kto_tag": bool | None,                           # kto
     "text": str | None,                               # pt
     "_source": "file, record i"}

Messages alternate (user|observation) → (assistant|function_call). What a stage needs is checked here,
so a bad record is reported with its file and index instead of silently disappearing later.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import DataError
from .dataset_info import DatasetAttr
from .readers import RawRecord

PROMPT_ROLES = ("user", "observation")
REPLY_ROLES = ("assistant", "function_call")


class RecordError(DataError):
    """One record is unusable; the pipeline raises it or skips and counts it (``bad_records``)."""


def guess_formatting(rec: dict[str, Any]) -> str:
    if "conversations" in rec or "messages" in rec:
        return "sharegpt"
    if "text" in rec and "instruction" not in rec:
        return "text"
    return "alpaca"


def convert_record(raw: RawRecord, attr: DatasetAttr, stage: str) -> dict[str, Any]:
    rec = raw.data
    if not isinstance(rec, dict):
        raise RecordError(f"{raw.where}: expected a JSON object, found {type(rec).__name__}.")
    formatting = attr.formatting
    if formatting == "auto":
        formatting = guess_formatting(rec)
        if formatting == "text":
            attr = DatasetAttr(**{**attr.__dict__, "columns": {**attr.columns, "prompt": "text"}})
            formatting = "alpaca"
        elif formatting == "sharegpt":
            key = "conversations" if "conversations" in rec else "messages"
            role_key = "role" if _first_msg_has(rec.get(key), "role") else "from"
            from .dataset_info import OPENAI_TAGS, SHAREGPT_COLUMNS, SHAREGPT_TAGS

            attr = DatasetAttr(**{**attr.__dict__, "columns": {**SHAREGPT_COLUMNS, "messages": key},
                                  "tags": dict(OPENAI_TAGS if role_key == "role" else SHAREGPT_TAGS)})
    _reject_media(raw, attr)
    if formatting == "alpaca":
        sample = _from_alpaca(raw, attr, stage)
    else:
        sample = _from_sharegpt(raw, attr, stage)
    sample["_source"] = raw.where
    return _check_for_stage(sample, raw, attr, stage)


def _first_msg_has(messages: Any, key: str) -> bool:
    return isinstance(messages, list) and bool(messages) and isinstance(messages[0], dict) and key in messages[0]


def _reject_media(raw: RawRecord, attr: DatasetAttr) -> None:
    for key in ("images", "videos", "audios"):
        col = attr.column(key)
        if col and raw.data.get(col):
            raise RecordError(f"{raw.where}: has {key} ({col}); multimodal training is not supported by tunekit yet. "
                              f"Remove the '{key}' column from the dataset_info.json entry '{attr.name}' to train on the text only.")


def _text(value: Any, raw: RawRecord, what: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in value):
        return "".join(p.get("text", "") for p in value)  # openai content parts (text only)
    raise RecordError(f"{raw.where}: {what} must be text, found {type(value).__name__}.")


def _tools(value: Any) -> str:
    if value is None or value == "":
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _get(raw: RawRecord, attr: DatasetAttr, key: str, required: bool = False) -> Any:
    col = attr.column(key)
    if col is None:
        return None
    if col not in raw.data:
        if required:
            present = ", ".join(sorted(map(str, raw.data))) or "none"
            raise RecordError(f"{raw.where}: missing column '{col}' ({key}); the record has: {present}. "
                              f"Fix the record or map the column in dataset_info.json 'columns' of '{attr.name}'.")
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
    prompt = _text(_get(raw, attr, "prompt", required=True), raw, f"'{attr.column('prompt')}'")
    query = _text(_get(raw, attr, "query"), raw, f"'{attr.column('query')}'")
    content = "\n".join(p for p in (prompt, query) if p)
    messages.append({"role": "user", "content": content})
    sample: dict[str, Any] = {"system": _text(_get(raw, attr, "system"), raw, "system"), "tools": _tools(_get(raw, attr, "tools")),
                              "chosen": None, "rejected": None, "kto_tag": None, "text": None}
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
            raise RecordError(f"{raw.where}: preference data needs both chosen and rejected answers "
                              f"(columns '{attr.column('chosen') or 'chosen'}' and '{attr.column('rejected') or 'rejected'}').")
        sample["chosen"] = {"role": "assistant", "content": _text(chosen, raw, "chosen")}
        sample["rejected"] = {"role": "assistant", "content": _text(rejected, raw, "rejected")}
    elif response is not None:
        messages.append({"role": "assistant", "content": _text(response, raw, f"'{attr.column('response')}'")})
    kto = _get(raw, attr, "kto_tag")
    if kto is not None:
        sample["kto_tag"] = _as_bool(kto, raw)
    sample["messages"] = messages
    return sample


def _as_bool(value: Any, raw: RawRecord) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if value in (0, 1):
        return bool(value)
    raise RecordError(f"{raw.where}: kto_tag must be true or false, found {value!r}.")


def _from_sharegpt(raw: RawRecord, attr: DatasetAttr, stage: str) -> dict[str, Any]:
    tags = attr.tags
    convo = _get(raw, attr, "messages", required=True)
    if not isinstance(convo, list) or not convo:
        raise RecordError(f"{raw.where}: '{attr.column('messages')}' must be a non-empty list of messages.")
    role_map = {tags["user_tag"]: "user", tags["assistant_tag"]: "assistant", tags["observation_tag"]: "observation",
                tags["function_tag"]: "function_call", tags["system_tag"]: "system"}
    system = _text(_get(raw, attr, "system"), raw, "system")
    messages: list[dict[str, str]] = []
    for i, msg in enumerate(convo):
        if not isinstance(msg, dict) or tags["role_tag"] not in msg or tags["content_tag"] not in msg:
            raise RecordError(f"{raw.where}: message {i} must be an object with '{tags['role_tag']}' and '{tags['content_tag']}'.")
        tag = msg[tags["role_tag"]]
        if tag not in role_map:
            raise RecordError(f"{raw.where}: message {i} has unknown role '{tag}'; expected one of {', '.join(role_map)} "
                              f"(set 'tags' in dataset_info.json entry '{attr.name}' to map other names).")
        role = role_map[tag]
        content = _text(msg[tags["content_tag"]], raw, f"message {i} content")
        if role == "system":
            if i != 0:
                raise RecordError(f"{raw.where}: message {i} is a system message; only the first message may be one.")
            system = content
            continue
        expect = PROMPT_ROLES if len(messages) % 2 == 0 else REPLY_ROLES
        if role not in expect:
            want = "a user/observation message" if expect is PROMPT_ROLES else "an assistant/function_call reply"
            raise RecordError(f"{raw.where}: message {i} has role '{tag}' where {want} is expected; "
                              f"conversations must alternate user → assistant.")
        messages.append({"role": role, "content": content})
    sample: dict[str, Any] = {"messages": messages, "system": system, "tools": _tools(_get(raw, attr, "tools")),
                              "chosen": None, "rejected": None, "kto_tag": None, "text": None}
    chosen, rejected = _get(raw, attr, "chosen"), _get(raw, attr, "rejected")
    if attr.ranking or chosen is not None:
        if chosen is None or rejected is None:
            raise RecordError(f"{raw.where}: preference data needs both '{attr.column('chosen') or 'chosen'}' and "
                              f"'{attr.column('rejected') or 'rejected'}' messages.")
        sample["chosen"] = _reply(chosen, raw, attr, "chosen")
        sample["rejected"] = _reply(rejected, raw, attr, "rejected")
    kto = _get(raw, attr, "kto_tag")
    if kto is not None:
        sample["kto_tag"] = _as_bool(kto, raw)
    if stage == "pt":
        sample["text"] = "\n".join(m["content"] for m in messages)
    return sample


def _reply(value: Any, raw: RawRecord, attr: DatasetAttr, what: str) -> dict[str, str]:
    tags = attr.tags
    if isinstance(value, dict):
        tag = value.get(tags["role_tag"], tags["assistant_tag"])
        role = {tags["assistant_tag"]: "assistant", tags["function_tag"]: "function_call"}.get(tag)
        if role is None:
            raise RecordError(f"{raw.where}: {what} must be an assistant or function_call message, found role '{tag}'.")
        return {"role": role, "content": _text(value.get(tags["content_tag"]), raw, what)}
    return {"role": "assistant", "content": _text(value, raw, what)}


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
            raise RecordError(f"{raw.where}: stage {stage} needs preference data (chosen/rejected); set \"ranking\": true "
                              f"in the dataset_info.json entry '{attr.name}' and map its columns.")
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
        raise RecordError(f"{raw.where}: the conversation ends with a {msgs[-1]['role']} message; "
                          f"{stage} needs it to end with the assistant's reply.")
    for i, m in enumerate(msgs):
        if m["role"] in REPLY_ROLES and not m["content"].strip():
            raise RecordError(f"{raw.where}: assistant turn {i // 2} is empty; remove the record or fill in the answer.")
    if stage == "kto" and sample["kto_tag"] is None:
        raise RecordError(f"{raw.where}: kto needs a desirable/undesirable label; map it with columns.kto_tag in '{attr.name}'.")
    if not msgs[0]["content"].strip() and len(msgs) == 2:
        raise RecordError(f"{raw.where}: the prompt is empty.")
    return sample
