"""``dataset_info.json``: LLaMA-Factory's registry of datasets, read as users already write it.

Each entry names a local file (``file_name``) or a hub dataset (``hf_hub_url`` / ``ms_hub_url`` /
``om_hub_url``), a ``formatting`` (alpaca, sharegpt, openai), optional ``columns`` and sharegpt ``tags``,
``ranking`` for preference data, ``split``, ``subset``, ``folder``, ``num_samples``. A name in
``dataset:`` that is not registered but is a path to a file is used directly (format guessed).

*Confined* reading (the web board's jobs and previews: ``$TUNEKIT_DATA_ROOTS`` or :func:`confined_to`): every
local place a dataset names (``file_name``, ``script_url``, a direct path) must resolve inside the given roots
with no hidden part below them, hub fields must hold hub ids (``namespace/name``, no local path of that name),
and ``cloud_file_name`` is refused (docs/webui.md, "Security model").
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..env import env_flag
from ..errors import ConfigError, DataError
from .readers import read_text

INFO_FILE = "dataset_info.json"

ALPACA_COLUMNS = {
    "prompt": "instruction",
    "query": "input",
    "response": "output",
    "history": None,
    "system": None,
    "tools": None,
    "chosen": None,
    "rejected": None,
    "kto_tag": None,
    "images": None,
    "videos": None,
    "audios": None,
}
SHAREGPT_COLUMNS = {
    "messages": "conversations",
    "system": None,
    "tools": None,
    "chosen": None,
    "rejected": None,
    "kto_tag": None,
    "images": None,
    "videos": None,
    "audios": None,
}
SHAREGPT_TAGS = {
    "role_tag": "from",
    "content_tag": "value",
    "user_tag": "human",
    "assistant_tag": "gpt",
    "observation_tag": "observation",
    "function_tag": "function_call",
    "system_tag": "system",
}
OPENAI_TAGS = {
    "role_tag": "role",
    "content_tag": "content",
    "user_tag": "user",
    "assistant_tag": "assistant",
    "observation_tag": "tool",
    "function_tag": "function_call",
    "system_tag": "system",
}
KNOWN_KEYS = {
    "file_name",
    "hf_hub_url",
    "ms_hub_url",
    "om_hub_url",
    "script_url",
    "cloud_file_name",
    "formatting",
    "ranking",
    "columns",
    "tags",
    "split",
    "subset",
    "folder",
    "num_samples",
}


@dataclass
class DatasetAttr:
    """One dataset as registered (or given by path)."""

    name: str
    load_from: str  # "file" | "hf_hub" | "ms_hub" | "om_hub" | "script"
    path: str  # file/folder path, or hub id
    formatting: str = "alpaca"
    ranking: bool = False
    split: str = "train"
    subset: str | None = None
    folder: str | None = None
    num_samples: int | None = None
    columns: dict[str, str | None] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    info_file: str | None = None

    def column(self, key: str) -> str | None:
        return self.columns.get(key)

    def describe(self) -> str:
        return f"dataset '{self.name}' ({self.path})"


def read_dataset_info(dataset_dir: str | Path) -> dict[str, Any]:
    path = Path(dataset_dir) / INFO_FILE
    if not path.is_file():
        return {}
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
        raise DataError(f'{where}: must be an object like {{"file_name": "data.json"}}.')
    unknown = set(entry) - KNOWN_KEYS
    if unknown:
        raise DataError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))}; valid keys: {', '.join(sorted(KNOWN_KEYS))}."
        )
    _check_value_kinds(where, entry)
    formatting = entry.get("formatting", "alpaca")
    if formatting not in ("alpaca", "sharegpt", "openai"):
        raise DataError(f"{where}: formatting '{formatting}' is not one of alpaca, sharegpt, openai.")
    use_ms, use_om = env_flag("USE_MODELSCOPE_HUB", False), env_flag("USE_OPENMIND_HUB", False)
    sources = [k for k in ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name") if k in entry]
    if "file_name" in entry and sources:  # LLaMA-Factory reads the hub one, a local-first reader the file: say which
        raise DataError(
            f"{where}: gives both file_name (a local file) and {sources[0]} (a remote dataset); keep the "
            f"one to read (LLaMA-Factory would read {sources[0]})."
        )
    if "file_name" in entry and entry.get("split", "train") != "train":
        raise DataError(
            f"{where}: split '{entry['split']}' names a split of a hub dataset, but file_name is a local "
            f"file, which is read whole (its one split is train): remove split, or give each split its own "
            f"file and entry."
        )
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
        raise DataError(
            f"{where}: unknown column key(s) {', '.join(sorted(bad_cols))} for {formatting} data; "
            f"valid: {', '.join(base_columns)}."
        )
    columns = {**base_columns, **columns_given}
    if formatting == "openai" and "messages" not in columns_given:
        columns["messages"] = "messages"
    tags = {**(OPENAI_TAGS if formatting == "openai" else SHAREGPT_TAGS), **tags_given}
    bad_tags = set(tags) - set(SHAREGPT_TAGS)
    if bad_tags:
        raise DataError(
            f"{where}: unknown tag key(s) {', '.join(sorted(bad_tags))}; valid: {', '.join(SHAREGPT_TAGS)}."
        )
    return DatasetAttr(
        name=name,
        load_from=load_from,
        path=path,
        formatting=formatting,
        ranking=bool(entry.get("ranking", False)),
        split=entry.get("split", "train"),
        subset=entry.get("subset"),
        folder=entry.get("folder"),
        num_samples=entry.get("num_samples"),
        columns=columns,
        tags=tags,
        info_file=info_file,
    )


_TEXT_KEYS = (
    "file_name",
    "hf_hub_url",
    "ms_hub_url",
    "om_hub_url",
    "script_url",
    "cloud_file_name",
    "formatting",
    "split",
    "subset",
    "folder",
)


def _check_value_kinds(where: str, entry: dict[str, Any]) -> None:
    """Each key's value is of the kind it means (``"ranking": "false"`` would read as true, a number as a column
    name would read no column): anything else is a :class:`DataError` naming the key, instead of a silent reading."""

    def kind(value: Any) -> str:
        return "null" if value is None else type(value).__name__

    for key in _TEXT_KEYS:
        if (
            key in entry
            and not isinstance(entry[key], str)
            and not (key in ("subset", "folder") and entry[key] is None)
        ):
            raise DataError(f'{where}: "{key}" must be text, found {entry[key]!r} ({kind(entry[key])}).')
    if "ranking" in entry and not isinstance(entry["ranking"], bool):
        raise DataError(
            f'{where}: "ranking" must be true or false (JSON booleans, no quotes), found {entry["ranking"]!r}.'
        )
    samples = entry.get("num_samples")
    if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int) or samples < 1):
        raise DataError(f'{where}: "num_samples" must be a whole number of at least 1, found {samples!r}.')
    for group in ("columns", "tags"):
        for key, value in (entry.get(group) or {}).items() if isinstance(entry.get(group), dict) else ():
            if not isinstance(value, str) and not (group == "columns" and value is None):
                what = "a column name (text) or null" if group == "columns" else "text"
                raise DataError(f"{where}: {group}.{key} must be {what}, found {value!r} ({kind(value)}).")


def resolve_datasets(names: list[str], dataset_dir: str | Path) -> list[DatasetAttr]:
    """Look up each name in ``dataset_dir/dataset_info.json``, or accept a direct file path."""
    info = read_dataset_info(dataset_dir)
    info_path = str(Path(dataset_dir) / INFO_FILE)
    attrs = []
    for name in names:
        if name in info:
            _check_confined(f"{info_path}, entry '{name}'", info[name], dataset_dir)
            attrs.append(parse_entry(name, info[name], dataset_dir, info_path))
            continue
        direct = Path(name) if Path(name).exists() else Path(dataset_dir) / name
        if direct.exists():
            _check_confined(f"Dataset '{name}'", {"file_name": str(direct)}, ".")
            attrs.append(
                DatasetAttr(
                    name=name,
                    load_from="file",
                    path=str(direct),
                    formatting="auto",
                    columns=dict(ALPACA_COLUMNS),
                    tags=dict(SHAREGPT_TAGS),
                )
            )
            continue
        import difflib

        close = difflib.get_close_matches(name, list(info), n=3)
        if not info:
            hint = (
                f"no {INFO_FILE} in dataset_dir '{dataset_dir}': set dataset_dir to the folder that has it, "
                "or give a file path"
            )
        else:
            hint = (
                f"Did you mean: {', '.join(close)}?"
                if close
                else f"registered names: {', '.join(list(info)[:12])}{' ...' if len(info) > 12 else ''}"
            )
        raise ConfigError(f"Dataset '{name}' is not in {info_path} and is not a file. {hint}")
    return attrs


# ---------------------------------------------------------------- confined reading (the web board)
ROOTS_ENV = "TUNEKIT_DATA_ROOTS"  # os.pathsep-separated folders a board's job may read datasets from
PATH_KEYS = ("file_name", "script_url")  # local places, relative to dataset_dir
HUB_KEYS = ("hf_hub_url", "ms_hub_url", "om_hub_url")
_HUB_PART = r"[A-Za-z0-9](?:[\w.-]*[A-Za-z0-9_])?"
_HUB_ID = re.compile(rf"{_HUB_PART}/{_HUB_PART}")  # the hub's grammar, with a namespace
_ROOTS: ContextVar[tuple[Path, ...] | None] = ContextVar("tunekit_data_roots", default=None)


def hub_id_problem(value: Any, *folders: str | Path) -> str | None:
    """Why ``value`` is not a hub id: ``namespace/name`` in the hub's grammar (at most 96 characters, no ``--``,
    ``..`` or ``.git`` ending) that names no existing path in the working folder or ``folders``; None if it is."""
    text = str(value)
    if not _HUB_ID.fullmatch(text) or len(text) > 96 or ".." in text or "--" in text or text.endswith(".git"):
        return "is not a hub id (namespace/name)"
    for base in (Path.cwd(), *map(Path, folders)):
        if os.path.lexists(base / text):
            return f"is not a hub id: it names the local path {base / text}"
    return None


def entry_locations(entry: Any, dataset_dir: str | Path) -> list[tuple[str, str, str]]:
    """``(key, kind, value)`` for every place a dataset_info.json entry names, whichever one is read: kind
    ``"path"`` (resolved against ``dataset_dir``, as the readers do), ``"hub"`` or ``"cloud"``."""
    if not isinstance(entry, dict):
        return []
    out = [(key, "path", str(Path(dataset_dir) / str(entry[key]))) for key in PATH_KEYS if key in entry]
    out += [(key, "hub", str(entry[key])) for key in HUB_KEYS if key in entry]
    return out + ([("cloud_file_name", "cloud", str(entry["cloud_file_name"]))] if "cloud_file_name" in entry else [])


@contextmanager
def confined_to(roots):
    """Within: datasets are read confined to ``roots`` (the board's in-process sample preview)."""
    token = _ROOTS.set(tuple(Path(r).expanduser().resolve() for r in roots))
    try:
        yield
    finally:
        _ROOTS.reset(token)


def data_roots() -> tuple[Path, ...] | None:
    """The roots reading is confined to (:func:`confined_to`, else ``$TUNEKIT_DATA_ROOTS``); None: not confined."""
    roots = _ROOTS.get()
    if roots is None and ROOTS_ENV in os.environ:
        roots = tuple(Path(p).resolve() for p in os.environ[ROOTS_ENV].split(os.pathsep) if p)
    return roots


def outside_data_roots(path: str | Path) -> tuple[Path, ...] | None:
    """The roots ``path`` is outside of (or hidden inside) when reading is confined (:func:`data_roots`), else None."""
    roots = data_roots()
    return roots if roots is not None and _outside(str(path), roots) else None


def _outside(path: str, roots: tuple[Path, ...]) -> bool:
    full = Path(path).expanduser().resolve()
    inside = [r for r in roots if full == r or r in full.parents]
    return not any(not any(p.startswith(".") for p in full.relative_to(r).parts) for r in inside)


def _check_confined(where: str, entry: Any, dataset_dir: str | Path) -> None:
    roots = data_roots()
    if roots is None:
        return
    for key, kind, value in entry_locations(entry, dataset_dir):
        if kind == "path" and _outside(value, roots):
            problem = (
                f"'{value}' is outside the folders this job may read ({', '.join(map(str, roots))}) or "
                f"hidden: use a file inside them"
            )
        elif kind == "hub":
            problem = hub_id_problem(value)
            problem = (
                problem and f"'{value}' {problem}: give a hub dataset id, or register a local file with file_name"
            )
        elif kind == "cloud":
            problem = "is not read here: download the file into the workspace and register it with file_name"
        else:
            problem = None
        if problem:
            raise DataError(f"{where}: {key} {problem}.")
