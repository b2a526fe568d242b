"""Read raw records from local files (json, jsonl, csv, parquet, txt, or a folder of them) or a hub.

Records keep their origin (``file`` and index) so every later error can name them. A file that is
not what its extension says raises a :class:`DataError` with the file name and the position.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..errors import DataError
from .dataset_info import DatasetAttr

SUFFIXES = {".json": "json", ".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet", ".txt": "text", ".arrow": "arrow"}


@dataclass
class RawRecord:
    data: dict[str, Any]
    file: str
    index: int  # 0-based position in the file (line number - 1 for jsonl/txt)

    @property
    def where(self) -> str:
        return f"{self.file}, record {self.index}"


def read_records(attr: DatasetAttr, cache_dir: str | None = None) -> list[RawRecord]:
    if attr.load_from == "file":
        return list(_read_local(Path(attr.path)))
    if attr.load_from in ("hf_hub", "ms_hub", "om_hub", "script"):
        return _read_hub(attr, cache_dir)
    raise DataError(f"{attr.describe()}: loading from '{attr.load_from}' is not supported; download the file and use file_name.")


def _read_local(path: Path) -> Iterator[RawRecord]:
    if not path.exists():
        raise DataError(f"Data file {path} does not exist (check file_name in dataset_info.json and dataset_dir).")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())
        if not files:
            raise DataError(f"Data folder {path} holds no .json/.jsonl/.csv/.parquet/.txt files.")
        kinds = {SUFFIXES[p.suffix] for p in files}
        if len(kinds) > 1:
            raise DataError(f"Data folder {path} mixes file types ({', '.join(sorted(kinds))}); keep one type per dataset.")
        for p in files:
            yield from _read_file(p)
    else:
        yield from _read_file(path)


def _read_file(path: Path) -> Iterator[RawRecord]:
    kind = SUFFIXES.get(path.suffix)
    if kind is None:
        raise DataError(f"Data file {path}: unsupported extension '{path.suffix}' (use .json, .jsonl, .csv, .parquet or .txt).")
    if kind == "json":
        yield from _read_json(path)
    elif kind == "jsonl":
        yield from _read_jsonl(path)
    elif kind == "text":
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                line = line.rstrip("\n")
                if line.strip():
                    yield RawRecord({"text": line}, str(path), i)
    else:
        yield from _read_tabular(path, kind)


def _read_json(path: Path) -> Iterator[RawRecord]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        # A .json file holding one object per line is common: accept it as jsonl.
        if exc.msg.startswith("Extra data"):
            yield from _read_jsonl(path)
            return
        raise DataError(f"Data file {path} is not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}. "
                        f"Fix the file, or save it as .jsonl with one object per line.") from None
    if isinstance(data, dict):
        for key in ("data", "train", "examples", "rows"):  # common wrappers
            if isinstance(data.get(key), list):
                data = data[key]
                break
        else:
            data = [data]
    if not isinstance(data, list):
        raise DataError(f"Data file {path} must hold a JSON list of records, found {type(data).__name__}.")
    for i, rec in enumerate(data):
        yield RawRecord(rec, str(path), i)


def _read_jsonl(path: Path) -> Iterator[RawRecord]:
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"Data file {path}, line {i + 1} is not valid JSON: {exc.msg} (column {exc.colno}).") from None
            yield RawRecord(rec, str(path), i)


def _read_tabular(path: Path, kind: str) -> Iterator[RawRecord]:
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        elif kind == "arrow":
            import datasets

            rows = datasets.Dataset.from_file(str(path)).to_list()
        else:
            import csv

            with open(path, encoding="utf-8", newline="") as f:
                rows = list(csv.DictReader(f))
    except Exception as exc:  # noqa: BLE001 - any parser failure is a data problem
        raise DataError(f"Data file {path} could not be read as {kind}: {exc}") from None
    for i, rec in enumerate(rows):
        yield RawRecord(rec, str(path), i)


def _read_hub(attr: DatasetAttr, cache_dir: str | None) -> list[RawRecord]:
    import datasets

    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true") or os.environ.get("HF_DATASETS_OFFLINE", "0").lower() in ("1", "true")
    hint = (f"Download it while online (it is then cached), or save it locally and register it with file_name in "
            f"dataset_info.json.")
    if attr.load_from != "hf_hub":
        raise DataError(f"{attr.describe()} lives on {attr.load_from.replace('_', ' ')}, which tunekit reads through the "
                        f"Hugging Face datasets cache only: {hint}")
    try:
        ds = datasets.load_dataset(attr.path, name=attr.subset, data_dir=attr.folder, split=attr.split, cache_dir=cache_dir)
    except Exception as exc:  # noqa: BLE001 - network, auth, missing split...
        state = "HF_HUB_OFFLINE is set and it is not in the cache" if offline else f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        raise DataError(f"{attr.describe()} is a Hugging Face Hub dataset and could not be loaded ({state}). {hint}") from None
    return [RawRecord(rec, f"{attr.path}[{attr.split}]", i) for i, rec in enumerate(ds)]
