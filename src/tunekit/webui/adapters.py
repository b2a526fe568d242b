"""Thin adapters from the board to the layers below (data, plan, infer), each optional.

Every adapter imports its module when called, so the board starts (and shows a clear note) in a
build where a layer is missing, and a page never imports torch before it needs to.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from tunekit.errors import TunekitError


def has_module(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------ data
def dataset_names(dataset_dir: str | None) -> list[str]:
    """Names registered in ``dataset_dir/dataset_info.json`` (empty when there is none)."""
    if not dataset_dir:
        return []
    from tunekit.data.dataset_info import read_dataset_info

    try:
        info = read_dataset_info(Path(dataset_dir))
    except Exception:  # a broken file: the train run will word the error; the picker just stays empty
        return []
    return list(info)


def template_names() -> list[str]:
    try:
        mod = importlib.import_module("tunekit.data.templates")
    except ImportError:
        return []
    for attr in ("template_names", "list_templates", "names"):
        fn = getattr(mod, attr, None)
        if callable(fn):
            return sorted(fn())
    registry = getattr(mod, "TEMPLATES", None)
    return sorted(registry) if isinstance(registry, dict) else []


def render_samples(cfg, n: int) -> list[list[tuple[str, bool]]]:
    """A few samples rendered with cfg's template: ``[(text, trained), ...]`` per sample."""
    from transformers import AutoTokenizer

    from tunekit.data.preview import render_samples as _render

    tokenizer = AutoTokenizer.from_pretrained(
        cfg.model_name_or_path, trust_remote_code=cfg.trust_remote_code, use_fast=cfg.use_fast_tokenizer,
    )
    return _render(cfg, tokenizer, n)


# ------------------------------------------------------------------ plan
def planner_available() -> bool:
    return has_module("tunekit.plan") and hasattr(importlib.import_module("tunekit.plan"), "make_plan")


def gpu_choices() -> list[str]:
    """GPU names from the planner's table (empty when the planner is missing)."""
    try:
        gpus = importlib.import_module("tunekit.plan.gpus")
    except ImportError:
        return []
    for attr in ("known_gpus", "gpu_names", "names", "list_gpus"):
        fn = getattr(gpus, attr, None)
        if callable(fn):
            return list(fn())
    for attr in ("GPUS", "GPU_TABLE", "TABLE"):
        table = getattr(gpus, attr, None)
        if isinstance(table, dict):
            return list(table)
        if isinstance(table, (list, tuple)):
            return [getattr(g, "name", None) or g.get("name") for g in table]
    return []


def make_plan(cfg, gpu: str | None, gpus: int) -> dict[str, Any]:
    from tunekit.plan import make_plan as _make_plan

    kwargs: dict[str, Any] = {"gpus": int(gpus or 1)}
    if gpu:
        kwargs["gpu"] = gpu
        try:
            return _make_plan(cfg, auto_fit=True, **kwargs)  # the overrides feed the Auto-fit button
        except TunekitError:
            pass  # auto-fit found nothing that fits: the plan without it still says why
    return _make_plan(cfg, **kwargs)
