"""``dataset_info.json``: LLaMA-Factory's registry of datasets, read as users already write it.

Each entry names a local file (``file_name``) or a hub dataset (``hf_hub_url`` / ``ms_hub_url`` /
``om_hub_url``), a ``formatting`` (alpaca, sharegpt, openai), optional ``columns`` and sharegpt ``tags``,
``ranking`` for preference data, ``split``, ``subset``, ``folder``, ``num_samples``. A name in
``dataset:`` that is not registered but is a path to a file is used directly (format guessed).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..errors import ConfigError, DataError

INFO_FILE = "dataset_info.json"

ALPACA_COLUMNS = {"prompt": "instruction", "query": "input", "response": "output", "history": None, "system": None,
                  "tools": None, "chosen": None, "rejected": None, "kto_tag": None, "images": None, "videos": None, "audios": None}
SHAREGPT_COLUMNS = {"messages": "conversations", "system": None, "tools": None, "chosen": None, "rejected": None,
                    "kto_tag": None, "images": None, "videos": None, "audios": None}
SHAREGPT_TAGS = {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
                 "observation_tag": "observation", "function_tag": "function_call", "system_tag": "system"}
OPENAI_TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant",
               "observation_tag": "tool", "function_tag": "function_call", "system_tag": "system"}
KNOWN_KEYS = {"file_name", "hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name", "formatting",
              "ranking", "columns", "tags", "split", "subset", "folder", "num_samples", "load_from"}


@dataclass
class DatasetAttr:
    """One dataset as registered (or given by path)."""

    name: str
    load_from: str  # "file" | "hf_hub" | "ms_hub" | "om_hub" | "script"
    path: str  # file/folder path, or hub id
    formatting: str = "alpaca"
    ranking: bool = False
    split: str = "train"
    subset: Optional[str] = None
    folder: Optional[str] = None
    num_samples: Optional[int] = None
    columns: dict[str, Optional[str]] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    info_file: Optional[str] = None

    def column(self, key: str) -> Optional[str]:
        return self.columns.get(key)

    def describe(self) -> str:
        return f"dataset '{self.name}' ({self.path})"


def read_dataset_info(dataset_dir: str | Path) -> dict[str, Any]:
    path = Path(dataset_dir) / INFO_FILE
    if not path.is_file():
        return {}
    from .readers import read_text  # (readers imports this module)

    try:
        info = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}.") from None
    if not isinstance(info, dict):
        raise DataError(f"{path} must be a JSON object mapping dataset names to their description.")
    return info


def parse_entry(name: str, entry: Any, dataset_dir: str | Path, info_file: str | None = None) -> DatasetAttr:
    where = f"{info_file or INFO_FILE}, entry '{name}'"
    if not isinstance(entry, dict):
        raise DataError(f"{where}: must be an object like {{\"file_name\": \"data.json\"}}.")
    unknown = set(entry) - KNOWN_KEYS
    if unknown:
        raise DataError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; valid keys: {', '.join(sorted(KNOWN_KEYS))}.")
    formatting = entry.get("formatting", "alpaca")
    if formatting not in ("alpaca", "sharegpt", "openai"):
        raise DataError(f"{where}: formatting '{formatting}' is not one of alpaca, sharegpt, openai.")
    use_ms = os.environ.get("USE_MODELSCOPE_HUB", "0").lower() in ("1", "true")
    use_om = os.environ.get("USE_OPENMIND_HUB", "0").lower() in ("1", "true")
    if "file_name" in entry:
        load_from, path = "file", str(Path(dataset_dir) / entry["file_name"])
    elif use_ms and "ms_hub_url" in entry:
        load_from, path = "ms_hub", entry["ms_hub_url"]
    elif use_om and "om_hub_url" in entry:
        load_from, path = "om_hub", entry["om_hub_url"]
    elif "hf_hub_url" in entry:
        load_from, path = "hf_hub", entry["hf_hub_url"]
    elif "ms_hub_url" in entry:
        load_from, path = "ms_hub", entry["ms_hub_url"]
    elif "om_hub_url" in entry:
        load_from, path = "om_hub", entry["om_hub_url"]
    elif "script_url" in entry:
        load_from, path = "script", entry["script_url"]
    elif "cloud_file_name" in entry:
        load_from, path = "cloud", entry["cloud_file_name"]
    else:
        raise DataError(f"{where}: needs file_name (a local file) or hf_hub_url / ms_hub_url (a hub dataset).")
    columns_given = entry.get("columns") or {}
    tags_given = entry.get("tags") or {}
    if not isinstance(columns_given, dict) or not isinstance(tags_given, dict):
        raise DataError(f"{where}: 'columns' and 'tags' must be objects.")
    base_columns = ALPACA_COLUMNS if formatting == "alpaca" else SHAREGPT_COLUMNS
    bad_cols = set(columns_given) - set(base_columns)
    if bad_cols:
        raise DataError(f"{where}: unknown column key(s) {', '.join(sorted(bad_cols))} for {formatting} data; valid: {', '.join(base_columns)}.")
    columns = {**base_columns, **columns_given}
    if formatting == "openai" and "messages" not in columns_given:
        columns["messages"] = "messages"
    tags = {**(OPENAI_TAGS if formatting == "openai" else SHAREGPT_TAGS), **tags_given}
    bad_tags = set(tags) - set(SHAREGPT_TAGS)
    if bad_tags:
        raise DataError(f"{where}: unknown tag key(s) {', '.join(sorted(bad_tags))}; valid: {', '.join(SHAREGPT_TAGS)}.")
    return DatasetAttr(
        name=name, load_from=load_from, path=path, formatting=formatting, ranking=bool(entry.get("ranking", False)),
        split=entry.get("split", "train"), subset=entry.get("subset"), folder=entry.get("folder"),
        num_samples=entry.get("num_samples"), columns=columns, tags=tags, info_file=info_file,
    )


def resolve_datasets(names: list[str], dataset_dir: str | Path) -> list[DatasetAttr]:
    """Look up each name in ``dataset_dir/dataset_info.json``, or accept a direct file path."""
    info = read_dataset_info(dataset_dir)
    info_path = str(Path(dataset_dir) / INFO_FILE)
    attrs = []
    for name in names:
        if name in info:
            attrs.append(parse_entry(name, info[name], dataset_dir, info_path))
            continue
        direct = Path(name) if Path(name).exists() else Path(dataset_dir) / name
        if direct.exists():
            attrs.append(DatasetAttr(name=name, load_from="file", path=str(direct), formatting="auto",
                                     columns=dict(ALPACA_COLUMNS), tags=dict(SHAREGPT_TAGS)))
            continue
        import difflib

        close = difflib.get_close_matches(name, list(info), n=3)
        if not info:
            hint = f"no {INFO_FILE} in dataset_dir '{dataset_dir}': set dataset_dir to the folder that has it, or give a file path"
        else:
            hint = f"Did you mean: {', '.join(close)}?" if close else f"registered names: {', '.join(list(info)[:12])}{' ...' if len(info) > 12 else ''}"
        raise ConfigError(f"Dataset '{name}' is not in {info_path} and is not a file. {hint}")
    return attrs
