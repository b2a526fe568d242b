"""What the Evaluate & predict, Chat and Export tabs load, without the widgets: a run's checkpoints, the Train tab's
model as those tabs take it, and the options their own model / adapter / template boxes set.

A run folder (``output_dir``) holds the final save and one ``checkpoint-N`` folder per saved step. A folder with
``adapter_config.json`` is an adapter (LoRA, OFT): it goes to ``adapter_name_or_path`` on top of the base model; a
folder with ``config.json`` and no ``adapter_config.json`` is a whole model (full or freeze tuning): it becomes
``model_name_or_path``. Every folder is read only after the board's path policy allowed it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .paths import PathPolicy, PathRefused

CHECKPOINT_DIR = re.compile(r"checkpoint-(\d+)")
ADAPTER_METHODS = ("lora", "oft", "ptuning", "prompt")  # methods whose run folder is an adapter on the base model


def _allowed(policy: PathPolicy, folder: str | None) -> Path | None:
    if not folder or not str(folder).strip():
        return None
    try:
        return policy.check(str(folder).strip(), "Option 'output_dir'")
    except PathRefused:
        return None


def run_checkpoints(policy: PathPolicy, run_dir: str | None) -> list[str]:
    """The ``checkpoint-N`` folders of the run folder ``run_dir``, by step, each named as ``run_dir/checkpoint-N``
    (relative when ``run_dir`` is: the command then reads as the user wrote it); none for a folder outside the
    allowed roots."""
    folder = _allowed(policy, run_dir)
    if folder is None or not folder.is_dir():
        return []
    steps = []
    for child in folder.iterdir():
        match = CHECKPOINT_DIR.fullmatch(child.name)
        if match and child.is_dir():
            steps.append((int(match.group(1)), child.name))
    base = str(run_dir).strip().rstrip("/")
    return [f"{base}/{name}" for _step, name in sorted(steps)]


def folder_kind(policy: PathPolicy, folder: str | None) -> str | None:
    """``"adapter"`` (adapter_config.json), ``"model"`` (config.json) or None (empty, missing or refused)."""
    path = _allowed(policy, folder)
    if path is None:
        return None
    if (path / "adapter_config.json").is_file():
        return "adapter"
    if (path / "config.json").is_file():
        return "model"
    return None


def pick_checkpoint(policy: PathPolicy, checkpoint: str | None, model: str | None) -> tuple[str, str] | None:
    """``(model, adapter)`` once ``checkpoint`` is picked: an adapter goes on ``model``, a whole model replaces it.
    None when the folder holds neither (or is refused): the boxes stay as they are."""
    kind = folder_kind(policy, checkpoint)
    if kind == "adapter":
        return model or "", str(checkpoint)
    if kind == "model":
        return str(checkpoint), ""
    return None


def trained_source(policy: PathPolicy, train: Mapping[str, Any]) -> dict[str, str]:
    """The Train tab's model as the other tabs load it: ``model``, ``adapter``, ``template`` and the run folder
    ``run_dir`` (its ``output_dir``). A LoRA / OFT run's folder is the adapter on the Train tab's model; a full or
    freeze run's folder is the model itself once it holds one (before that, the Train tab's model)."""
    model = str(train.get("model_name_or_path") or "")
    run_dir = str(train.get("output_dir") or "").strip()
    adapter = ""
    if (train.get("finetuning_type") or "lora") in ADAPTER_METHODS:
        adapter = run_dir
    elif folder_kind(policy, run_dir) == "model":
        model = run_dir
    return {"model": model, "adapter": adapter, "template": str(train.get("template") or ""), "run_dir": run_dir}


def source_values(model: str | None, adapter: str | None, template: str | None) -> dict[str, Any]:
    """The options a tab's own model / adapter / template boxes set (an empty box sets nothing)."""
    vals: dict[str, Any] = {}
    for key, value in (("model_name_or_path", model), ("adapter_name_or_path", adapter), ("template", template)):
        if value and str(value).strip():
            vals[key] = str(value).strip()
    return vals
