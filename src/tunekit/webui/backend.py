"""Adapters from the board to the layers below (data, model, plan): the few calls the board makes.

None of these modules imports torch until it loads a tokenizer or a model, so a page never imports torch before it
needs to.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tunekit import plan
from tunekit.config.schema import Config
from tunekit.data import preview
from tunekit.data.dataset_info import read_dataset_info
from tunekit.data.templates import list_templates
from tunekit.errors import TunekitError
from tunekit.model.loader import load_tokenizer
from tunekit.plan.gpus import find_gpu, known_gpus

NO_GPU = ""  # the GPU picker's "none / CPU" choice: the plan then reports memory without a GPU to fit


# ------------------------------------------------------------------ data
def dataset_names(dataset_dir: str | None) -> list[str]:
    """Names registered in ``dataset_dir/dataset_info.json`` (empty when there is none)."""
    if not dataset_dir:
        return []
    try:
        info = read_dataset_info(Path(dataset_dir))
    except Exception:  # a broken file: the train run will word the error; the picker just stays empty
        return []
    return list(info)


def template_names() -> list[str]:
    return sorted(list_templates())


def preview_samples(cfg: Config, n: int) -> list:
    """A few samples rendered with cfg's template (``data.preview.SamplePreview``: pieces and media).

    The tokenizer comes from tunekit's own loader with the config, so the preview honours every
    tokenizer option training honours (revision, cache_dir, split_special_tokens, ...).
    """
    return preview.preview_samples(cfg, load_tokenizer(cfg), n)


def model_has_chat_template(model_dir: str | None) -> bool:
    """Whether a local model folder ships a chat template (then ``template: jinja`` uses it)."""
    if not model_dir:
        return False
    folder = Path(model_dir)
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        conf = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(conf.get("chat_template")) if isinstance(conf, dict) else False


# ------------------------------------------------------------------ plan
def gpu_choices() -> list[str]:
    """GPU names from the planner's table."""
    return list(known_gpus())


def detected_gpu() -> str:
    """The planner's name for this machine's GPU 0, or :data:`NO_GPU` when there is none (or it is unknown).

    ``nvidia-smi`` first: it reads the name without creating a CUDA context in the board process (one
    would hold GPU memory the training job needs); torch only when torch is already imported.
    """
    names: list[str] = []
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout
            names = [line.strip() for line in out.splitlines() if line.strip()]
        except (OSError, subprocess.SubprocessError):
            names = []
    torch = sys.modules.get("torch")
    if not names and torch is not None and torch.cuda.is_available():
        names = [torch.cuda.get_device_name(0)]
    for name in names[:1]:
        for candidate in (name, name.replace(" ", "-"), *name.split()):
            try:
                return find_gpu(candidate).name
            except TunekitError:
                continue
    return NO_GPU


def make_plan(cfg: Config, gpu: str | None, gpus: int) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"gpus": int(gpus or 1)}
    if gpu:
        kwargs["gpu"] = gpu
        try:
            return plan.make_plan(cfg, auto_fit=True, **kwargs).to_json()  # the overrides feed the Auto-fit button
        except TunekitError:
            pass  # auto-fit found nothing that fits: the plan without it still says why
    return plan.make_plan(cfg, **kwargs).to_json()
