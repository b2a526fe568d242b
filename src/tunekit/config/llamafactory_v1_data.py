"""LLaMA-Factory v1's ``train_dataset`` / ``eval_dataset`` read as tunekit's ``dataset`` / ``eval_dataset``, as v1's
``DataEngine`` resolves them: a ``.yaml`` file is a dataset list (``name: {path, source, converter, split, size,
weight, streaming}``), another existing path one local dataset, anything else a Hugging Face hub dataset. Paths are
read from the current folder, as v1 reads them (``llamafactory_v1.py`` reads the rest of a v1 config)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .files import load_yaml_text
from .llamafactory_v1_plugins import V1Reader


def read_dataset(reader: V1Reader, key: str, value: Any) -> None:
    """v1's ``DataEngine``: a ``.yaml`` file is a dataset list; another existing path is one local dataset; anything
    else a Hugging Face hub dataset. Paths are read from the current folder, as v1 reads them."""
    option = "dataset" if key == "train_dataset" else "eval_dataset"
    if not isinstance(value, str) or not value.strip():
        reader.refuse(key, value, "expected a path (text)")
        return
    if value.endswith(".yaml") and os.path.isfile(value):
        paths = _dataset_list(reader, key, value)
        if paths:
            reader.set(option, ",".join(paths), f"`{key}: {value}` (its local files)")
    elif value.endswith(".yaml"):
        reader.refuse(
            key,
            value,
            f"no such file in {os.getcwd()} (v1 reads it from the "
            "current folder, and would otherwise download it from the Hugging Face hub); tunekit reads "
            "local dataset lists only: run from the folder it is relative to, or download it",
        )
    elif os.path.exists(value):
        reader.set(option, value, f"`{key}: {value}`")
    else:
        reader.refuse(
            key,
            value,
            f"neither a file nor a folder in {os.getcwd()}, so v1 reads "
            "a Hugging Face hub dataset; tunekit reads hub datasets registered in dataset_info.json "
            "(hf_hub_url): register it and give dataset=NAME on the command line, or download it",
        )


ENTRY_KEYS = ("path", "source", "split", "converter", "size", "weight", "streaming")
CONVERTERS = (None, "alpaca", "sharegpt")  # record forms tunekit recognises in a file given by path


def _dataset_list(reader: V1Reader, key: str, file: str) -> list[str]:
    """The local files of a v1 dataset list (``data/v1_sft_demo.yaml``: ``name: {path, source, converter, ...}``)."""
    try:
        entries = load_yaml_text(Path(file).read_text(encoding="utf-8"), file)
    except (OSError, UnicodeDecodeError) as exc:
        reader.refuse(key, file, f"cannot be read ({exc})")
        return []
    if not isinstance(entries, dict) or not entries:
        reader.refuse(key, file, "a v1 dataset list maps names to {path, source, ...}")
        return []
    paths = []
    for name, entry in entries.items():
        where = f"`{key}: {file}`, entry '{name}'"
        problem = _entry_problem(entry)
        if problem:
            reader.problem(key, f"LLaMA-Factory v1 dataset list {where} (in {reader.path}): {problem}.")
        else:
            paths.append(entry["path"])
    return paths


def _entry_problem(entry: Any) -> str | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        return "needs path: a file or folder"
    unknown = [k for k in entry if k not in ENTRY_KEYS]
    if unknown:
        return f"unknown key(s) {', '.join(map(str, unknown))}; v1 reads {', '.join(ENTRY_KEYS)}"
    source = entry.get("source", "hf_hub")
    if source != "local":
        return (
            f"source {source} ({entry['path']}) is a hub dataset; tunekit reads hub datasets registered in "
            "dataset_info.json (hf_hub_url): register it and give dataset=NAME on the command line, or download it"
        )
    if not os.path.exists(entry["path"]):
        return f"path {entry['path']} does not exist in {os.getcwd()} (v1 reads it from the current folder)"
    if entry.get("split", "train") != "train":
        return f"split {entry['split']}: a local file is read whole (its one split is train); remove split"
    if entry.get("converter") not in CONVERTERS:
        return (
            f"converter {entry['converter']}: tunekit recognises alpaca, sharegpt and v1 message records in a file "
            "given by path; register the file in dataset_info.json with its columns instead"
        )
    if entry.get("size") is not None or entry.get("weight") is not None:
        what = "size" if entry.get("size") is not None else "weight"
        return (
            f"{what}: {entry[what]} draws that many samples at random, with replacement; tunekit has no per-dataset "
            "sampling: remove it (max_samples=N on the command line reads the first N records of every dataset)"
        )
    if entry.get("streaming"):
        return "streaming: true; tunekit reads datasets whole: remove streaming"
    return None
