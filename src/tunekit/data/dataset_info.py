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

from ..config.problems import Said
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

    def describe(self) -> Said:
        """``dataset 'x' (path)``: a keyed piece, said again in the language of the message it is part of."""
        return Said("part_dataset_path", name=self.name, path=str(self.path))


def read_dataset_info(dataset_dir: str | Path) -> dict[str, Any]:
    path = Path(dataset_dir) / INFO_FILE
    if not path.is_file():
        return {}
    try:
        info = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        said = Said("info_invalid_json", path=str(path), line=exc.lineno, column=exc.colno, error=exc.msg)
        raise DataError(said) from None
    if not isinstance(info, dict):
        raise DataError(Said("info_not_object", path=str(path)))
    return info


def parse_entry(name: str, entry: Any, dataset_dir: str | Path, info_file: str | None = None) -> DatasetAttr:
    where = Said("part_info_entry", file=str(info_file or INFO_FILE), name=str(name))
    if not isinstance(entry, dict):
        raise DataError(Said("info_entry_not_object", where=where))
    unknown = set(entry) - KNOWN_KEYS
    if unknown:
        keys, valid = ", ".join(sorted(unknown)), ", ".join(sorted(KNOWN_KEYS))
        raise DataError(Said("info_unknown_keys", where=where, keys=keys, valid=valid))
    _check_value_kinds(where, entry)
    formatting = entry.get("formatting", "alpaca")
    if formatting not in ("alpaca", "sharegpt", "openai"):
        raise DataError(Said("info_bad_formatting", where=where, formatting=str(formatting)))
    use_ms, use_om = env_flag("USE_MODELSCOPE_HUB", False), env_flag("USE_OPENMIND_HUB", False)
    sources = [k for k in ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name") if k in entry]
    if "file_name" in entry and sources:  # LLaMA-Factory reads the hub one, a local-first reader the file: say which
        raise DataError(Said("info_file_and_hub", where=where, source=sources[0]))
    if "file_name" in entry and entry.get("split", "train") != "train":
        raise DataError(Said("info_split_of_file", where=where, split=str(entry["split"])))
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
        raise DataError(Said("info_no_source", where=where))
    columns_given = entry.get("columns") or {}
    tags_given = entry.get("tags") or {}
    if not isinstance(columns_given, dict) or not isinstance(tags_given, dict):
        raise DataError(Said("info_columns_not_objects", where=where))
    base_columns = ALPACA_COLUMNS if formatting == "alpaca" else SHAREGPT_COLUMNS
    bad_cols = set(columns_given) - set(base_columns)
    if bad_cols:
        keys, valid = ", ".join(sorted(bad_cols)), ", ".join(base_columns)
        raise DataError(Said("info_unknown_columns", where=where, keys=keys, formatting=formatting, valid=valid))
    columns = {**base_columns, **columns_given}
    if formatting == "openai" and "messages" not in columns_given:
        columns["messages"] = "messages"
    tags = {**(OPENAI_TAGS if formatting == "openai" else SHAREGPT_TAGS), **tags_given}
    bad_tags = set(tags) - set(SHAREGPT_TAGS)
    if bad_tags:
        keys, valid = ", ".join(sorted(bad_tags)), ", ".join(SHAREGPT_TAGS)
        raise DataError(Said("info_unknown_tags", where=where, keys=keys, valid=valid))
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


def _check_value_kinds(where: Said, entry: dict[str, Any]) -> None:
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
            raise DataError(Said("info_not_text", where=where, key=key, value=repr(entry[key]), type=kind(entry[key])))
    if "ranking" in entry and not isinstance(entry["ranking"], bool):
        raise DataError(Said("info_ranking_not_bool", where=where, value=repr(entry["ranking"])))
    samples = entry.get("num_samples")
    if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int) or samples < 1):
        raise DataError(Said("info_num_samples", where=where, value=repr(samples)))
    for group in ("columns", "tags"):
        for key, value in (entry.get(group) or {}).items() if isinstance(entry.get(group), dict) else ():
            if not isinstance(value, str) and not (group == "columns" and value is None):
                what = Said("part_column_or_null" if group == "columns" else "part_text")
                said = Said(
                    "info_group_value",
                    where=where,
                    group=group,
                    key=str(key),
                    what=what,
                    value=repr(value),
                    type=kind(value),
                )
                raise DataError(said)


def resolve_datasets(names: list[str], dataset_dir: str | Path) -> list[DatasetAttr]:
    """Look up each name in ``dataset_dir/dataset_info.json``, or accept a direct file path."""
    info = read_dataset_info(dataset_dir)
    info_path = str(Path(dataset_dir) / INFO_FILE)
    attrs = []
    for name in names:
        if name in info:
            _check_confined(Said("part_info_entry", file=info_path, name=name), info[name], dataset_dir)
            attrs.append(parse_entry(name, info[name], dataset_dir, info_path))
            continue
        direct = Path(name) if Path(name).exists() else Path(dataset_dir) / name
        if direct.exists():
            _check_confined(Said("part_dataset_named", name=name), {"file_name": str(direct)}, ".")
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
            hint = Said("part_no_info_file", file=INFO_FILE, folder=str(dataset_dir))
        elif close:
            hint = Said("part_dataset_did_you_mean", names=", ".join(close))
        else:
            more = " ..." if len(info) > 12 else None
            hint = Said("part_registered_names", names=", ".join(list(info)[:12]), more=more)
        raise ConfigError(Said("info_not_registered", name=name, path=info_path, hint=hint))
    return attrs


# ---------------------------------------------------------------- confined reading (the web board)
ROOTS_ENV = "TUNEKIT_DATA_ROOTS"  # os.pathsep-separated folders a board's job may read datasets from
PATH_KEYS = ("file_name", "script_url")  # local places, relative to dataset_dir
HUB_KEYS = ("hf_hub_url", "ms_hub_url", "om_hub_url")
_HUB_PART = r"[A-Za-z0-9](?:[\w.-]*[A-Za-z0-9_])?"
_HUB_ID = re.compile(rf"{_HUB_PART}/{_HUB_PART}")  # the hub's grammar, with a namespace
_ROOTS: ContextVar[tuple[Path, ...] | None] = ContextVar("tunekit_data_roots", default=None)


def hub_id_problem(value: Any, *folders: str | Path) -> Said | None:
    """Why ``value`` is not a hub id: ``namespace/name`` in the hub's grammar (at most 96 characters, no ``--``,
    ``..`` or ``.git`` ending) that names no existing path in the working folder or ``folders``; None if it is."""
    text = str(value)
    if not _HUB_ID.fullmatch(text) or len(text) > 96 or ".." in text or "--" in text or text.endswith(".git"):
        return Said("part_not_hub_id")
    for base in (Path.cwd(), *map(Path, folders)):
        if os.path.lexists(base / text):
            return Said("part_hub_id_local", path=str(base / text))
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


def _check_confined(where: Said, entry: Any, dataset_dir: str | Path) -> None:
    roots = data_roots()
    if roots is None:
        return
    for key, kind, value in entry_locations(entry, dataset_dir):
        if kind == "path" and _outside(value, roots):
            problem = Said("part_outside_roots", value=value, roots=tuple(map(str, roots)))
        elif kind == "hub":
            problem = hub_id_problem(value)
            problem = problem and Said("part_hub_id_fix", value=value, problem=problem)
        elif kind == "cloud":
            problem = Said("part_cloud_not_read")
        else:
            problem = None
        if problem:
            raise DataError(Said("info_confined", where=where, key=key, problem=problem))
