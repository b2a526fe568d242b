"""The Train form's first-run defaults: what a newcomer's first run needs filled in.

LLaMA Board's habits: the loss logged every 5 steps (every step for a run shorter than 50 steps, decided when the
step count is known: at Preview / Start), the loss plot written, and a run name and output folder filled in
(``saves/<model folder>/<stage>-<method>-<date>-<time>``, inside the workspace). The schema's own defaults stay
as they are (``logging_steps: 10``, ``plot_loss: false``): the board sets these values in its form, so they are in
the command line and the YAML it shows, like anything else typed into the form.

No Gradio here: the values are plain form values (:mod:`tunekit.webui.fields`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FIRST_LOGGING_STEPS = 5
SHORT_RUN_STEPS = 50  # a run shorter than this logs every step
STAMP = "%Y%m%d-%H%M%S"
SAVES = "saves"

_NAME = r"[a-z0-9_]+-[a-z0-9_]+-\d{8}-\d{6}"
_AUTO_RUN = re.compile(rf"{_NAME}")
_AUTO_DIR = re.compile(rf"{SAVES}/(?:[^/]+/)?{_NAME}")


def run_name(form: Mapping[str, Any], when: float | None = None) -> str:
    """``<stage>-<method>-<date>-<time>``, e.g. ``sft-lora-20261205-061230``."""
    stage = str(form.get("stage") or "sft")
    method = str(form.get("finetuning_type") or "lora")
    return f"{stage}-{method}-{time.strftime(STAMP, time.localtime(when))}"


def model_folder(model: Any) -> str:
    """The last part of a local folder or a hub id (``Qwen/Qwen2.5-0.5B``: ``Qwen2.5-0.5B``), as a folder name."""
    name = str(model or "").strip().rstrip("/\\").replace("\\", "/").split("/")[-1]
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")
    return name


def output_dir(form: Mapping[str, Any], when: float | None = None) -> str:
    """``saves/<model folder>/<run name>`` (``saves/<run name>`` while no model is set)."""
    folder = model_folder(form.get("model_name_or_path"))
    return "/".join(p for p in (SAVES, folder, run_name(form, when)) if p)


def is_auto(name: str, value: Any) -> bool:
    """Whether ``value`` of ``output_dir`` / ``run_name`` is empty or a name the board made (so it may rename it)."""
    text = str(value or "").strip()
    if not text:
        return True
    pattern = _AUTO_DIR if name == "output_dir" else _AUTO_RUN
    return pattern.fullmatch(text) is not None


def first_run_form(names, when: float | None = None) -> dict[str, Any]:
    """The form values a new page starts with (only those of ``names``, the form's fields)."""
    values: dict[str, Any] = {
        "logging_steps": str(FIRST_LOGGING_STEPS),
        "plot_loss": True,
        "output_dir": output_dir({}, when),
        "run_name": run_name({}, when),
    }
    return {k: v for k, v in values.items() if k in names}


def renamed(form: Mapping[str, Any], when: float | None = None) -> dict[str, Any]:
    """New ``output_dir`` / ``run_name`` for the form's model, stage and method, for those the board named and
    whose name no longer matches them (a name that still does keeps its time: a restored page keeps its run's)."""
    fresh = {"output_dir": output_dir(form, when), "run_name": run_name(form, when)}
    out = {}
    for key, value in fresh.items():
        current = str(form.get(key) or "")
        if key in form and is_auto(key, current) and (not current or current[:-15] != value[:-15]):
            out[key] = value  # [:-15]: the name without its "<date>-<time>" (YYYYmmdd-HHMMSS)
    return out


def keeps_its_folder(form: Mapping[str, Any]) -> bool:
    """The run is meant to go into an existing folder: resuming it, or overwriting it."""
    resume = str(form.get("resume_from_checkpoint") or "").strip().lower()
    return bool(form.get("overwrite_output_dir")) or resume not in ("", "false", "none", "null")


def taken(folder: Path) -> bool:
    return folder.exists() and (not folder.is_dir() or any(folder.iterdir()))


def board_logging_steps(value: Any) -> bool:
    """Whether the form's ``logging_steps`` is the first-run value, or the every-step value a short run gets (a
    Preview sets it in the form; the next Preview says why again)."""
    try:
        return float(str(value).strip()) in (FIRST_LOGGING_STEPS, 1)
    except ValueError:
        return False
