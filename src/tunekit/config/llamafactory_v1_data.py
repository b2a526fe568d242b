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
from .problems import Said


def read_dataset(reader: V1Reader, key: str, value: Any) -> None:
    """v1's ``DataEngine``: a ``.yaml`` file is a dataset list; another existing path is one local dataset; anything
    else a Hugging Face hub dataset. Paths are read from the current folder, as v1 reads them."""
    option = "dataset" if key == "train_dataset" else "eval_dataset"
    if not isinstance(value, str) or not value.strip():
        reader.refuse(key, value, Said("part_v1_expected_path"))
        return
    if value.endswith(".yaml") and os.path.isfile(value):
        paths, draws = _dataset_list(reader, key, value)
        if paths:
            reader.set(option, ",".join(paths), f"`{key}: {value}` (its local files)")
        if draws:
            _set_draws(reader, key, value, draws)
    elif value.endswith(".yaml"):
        reader.refuse(key, value, Said("part_v1_list_missing", cwd=os.getcwd()))
    elif os.path.exists(value):
        reader.set(option, value, f"`{key}: {value}`")
    else:
        reader.refuse(key, value, Said("part_v1_hub_dataset", cwd=os.getcwd()))


ENTRY_KEYS = ("path", "source", "split", "converter", "size", "weight", "streaming")
CONVERTERS = (None, "alpaca", "sharegpt")  # record forms tunekit recognises in a file given by path


def _dataset_list(reader: V1Reader, key: str, file: str) -> tuple[list[str], dict[str, dict[str, float]]]:
    """The local files of a v1 dataset list (``data/v1_sft_demo.yaml``: ``name: {path, source, converter, ...}``) and
    the ``size`` / ``weight`` of those entries that give them, by file (tunekit's ``dataset_sampling``)."""
    try:
        entries = load_yaml_text(Path(file).read_text(encoding="utf-8"), file)
    except (OSError, UnicodeDecodeError) as exc:
        reader.refuse(key, file, Said("part_v1_unreadable", error=str(exc)))
        return [], {}
    if not isinstance(entries, dict) or not entries:
        reader.refuse(key, file, Said("part_v1_list_form"))
        return [], {}
    paths, draws = [], {}
    for name, entry in entries.items():
        problem = _entry_problem(entry) or _draw_problem(entry, paths, draws)
        if problem:
            message = Said("v1_list_entry", key=key, file=file, name=str(name), path=reader.path, problem=problem)
            reader.problem(key, message)
            continue
        paths.append(entry["path"])
        draw = {k: entry[k] for k in ("size", "weight") if entry.get(k) is not None}
        if draw:
            draws[entry["path"]] = draw
    return paths, draws


def _draw_problem(entry: dict[str, Any], paths: list[str], draws: dict[str, dict[str, float]]) -> Said | None:
    """``size`` / ``weight`` as v1 draws them: a whole number of samples at least 1, a weight above 0 (in v1 a 0 either
    does nothing or empties the dataset), and one draw per file (tunekit names datasets by file)."""
    size, weight = entry.get("size"), entry.get("weight")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        return Said("part_v1_entry_size", size=str(size))
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0):
        return Said("part_v1_entry_weight", weight=str(weight))
    if entry["path"] in paths and (size is not None or weight is not None or entry["path"] in draws):
        return Said("part_v1_entry_twice", entry=entry["path"])
    return None


def _set_draws(reader: V1Reader, key: str, file: str, draws: dict[str, dict[str, float]]) -> None:
    """``dataset_sampling`` from the list's sizes and weights (train and eval lists together; one draw per file)."""
    merged = dict(reader.options.get("dataset_sampling") or {})
    for path, draw in draws.items():
        if merged.get(path, draw) != draw:
            why = Said("part_v1_draws_differ", path=path, draw=str(draw), other=str(merged[path]))
            reader.refuse(key, file, why)
            return
        merged[path] = draw
    given = "; ".join(f"{path}: " + ", ".join(f"{k} {v}" for k, v in draw.items()) for path, draw in draws.items())
    origin = reader.notes.get("dataset_sampling")
    here = f"`{key}: {file}` ({given})"
    reader.set("dataset_sampling", merged, f"{origin} and {here}" if origin else here)


def _entry_problem(entry: Any) -> Said | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        return Said("part_v1_entry_needs_path")
    unknown = [k for k in entry if k not in ENTRY_KEYS]
    if unknown:
        return Said("part_v1_entry_keys", wrong=tuple(map(str, unknown)), allowed=ENTRY_KEYS)
    source = entry.get("source", "hf_hub")
    if source != "local":
        return Said("part_v1_entry_hub", source=str(source), entry=entry["path"])
    if not os.path.exists(entry["path"]):
        return Said("part_v1_entry_missing", entry=entry["path"], cwd=os.getcwd())
    if entry.get("split", "train") != "train":
        return Said("part_v1_entry_split", split=str(entry["split"]))
    if entry.get("converter") not in CONVERTERS:
        return Said("part_v1_entry_converter", converter=str(entry["converter"]))
    if entry.get("streaming"):
        return Said("part_v1_entry_streaming")
    return None
