"""LLaMA-Factory v1's ``train_dataset`` / ``eval_dataset`` read as tunekit's ``dataset`` / ``eval_dataset``, as v1's
``DataEngine`` resolves them: a ``.yaml`` file is a dataset list (``name: {path, source, converter, split, size,
weight, streaming}``), another existing path one local dataset, anything else a Hugging Face hub dataset. Paths are
read from the current folder, as v1 reads them (``llamafactory_v1.py`` reads the rest of a v1 config). An entry's
``size`` / ``weight`` become ``dataset_sampling``, drawn as v1 draws them (``data/sampling.py``)."""

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
        paths, draws = _dataset_list(reader, key, value)
        if paths:
            reader.set(option, ",".join(paths), f"`{key}: {value}` (its local files)")
        if draws:
            _set_draws(reader, key, value, draws)
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


def _dataset_list(reader: V1Reader, key: str, file: str) -> tuple[list[str], dict[str, dict[str, float]]]:
    """The local files of a v1 dataset list (``data/v1_sft_demo.yaml``: ``name: {path, source, converter, ...}``) and
    the ``size`` / ``weight`` of those entries that give them, by file (tunekit's ``dataset_sampling``)."""
    try:
        entries = load_yaml_text(Path(file).read_text(encoding="utf-8"), file)
    except (OSError, UnicodeDecodeError) as exc:
        reader.refuse(key, file, f"cannot be read ({exc})")
        return [], {}
    if not isinstance(entries, dict) or not entries:
        reader.refuse(key, file, "a v1 dataset list maps names to {path, source, ...}")
        return [], {}
    paths, draws = [], {}
    for name, entry in entries.items():
        where = f"LLaMA-Factory v1 dataset list `{key}: {file}`, entry '{name}' (in {reader.path})"
        problem = _entry_problem(entry) or _draw_problem(entry, paths, draws)
        if problem:
            reader.problem(key, f"{where}: {problem}.")
            continue
        paths.append(entry["path"])
        draw = {k: entry[k] for k in ("size", "weight") if entry.get(k) is not None}
        if draw:
            draws[entry["path"]] = draw
    return paths, draws


def _draw_problem(entry: dict[str, Any], paths: list[str], draws: dict[str, dict[str, float]]) -> str | None:
    """``size`` / ``weight`` as v1 draws them: a whole number of samples at least 1, a weight above 0 (in v1 a 0 either
    does nothing or empties the dataset), and one draw per file (tunekit names datasets by file)."""
    size, weight = entry.get("size"), entry.get("weight")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        return f"size: {size} must be a whole number of samples, at least 1 (remove it to read every record once)"
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0):
        return f"weight: {weight} must be a number above 0 (remove it to read every record once)"
    if entry["path"] in paths and (size is not None or weight is not None or entry["path"] in draws):
        return (
            f"path {entry['path']} is read by an earlier entry too; tunekit names a dataset by its file, so one file "
            "has one size / weight: merge the entries"
        )
    return None


def _set_draws(reader: V1Reader, key: str, file: str, draws: dict[str, dict[str, float]]) -> None:
    """``dataset_sampling`` from the list's sizes and weights (train and eval lists together; one draw per file)."""
    merged = dict(reader.options.get("dataset_sampling") or {})
    for path, draw in draws.items():
        if merged.get(path, draw) != draw:
            reader.refuse(
                key,
                file,
                f"its entry for {path} draws {draw}, the other dataset list's {merged[path]}; tunekit names a dataset "
                "by its file, so one file has one size / weight",
            )
            return
        merged[path] = draw
    given = "; ".join(f"{path}: " + ", ".join(f"{k} {v}" for k, v in draw.items()) for path, draw in draws.items())
    origin = reader.notes.get("dataset_sampling")
    here = f"`{key}: {file}` ({given})"
    reader.set("dataset_sampling", merged, f"{origin} and {here}" if origin else here)


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
    if entry.get("streaming"):
        return "streaming: true; tunekit reads datasets whole: remove streaming"
    return None
