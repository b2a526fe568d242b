"""Adapters from the board to the layers below (data, model, plan): the few calls the board makes.

None of these modules imports torch until it loads a tokenizer or a model, so a page never imports torch before it
needs to.
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tunekit import plan
from tunekit.config.schema import Config
from tunekit.data import mm_plugins, preview
from tunekit.data.dataset_info import DatasetAttr, read_dataset_info
from tunekit.data.mm_plugins.llava_next import text_model_type
from tunekit.data.readers import data_files, read_records
from tunekit.data.templates import list_templates
from tunekit.errors import TunekitError
from tunekit.model.loader import load_tokenizer
from tunekit.plan.gpus import find_gpu, known_gpus
from tunekit.tiny.text import FAMILIES as TEXT_FAMILIES
from tunekit.tiny.tokenizer import TOKENIZERS

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


MAX_COUNT_BYTES = 64 * 2**20  # a local dataset larger than this shows "?" rows: counting is for the picker, not a scan
_ROWS: dict[tuple, int | None] = {}  # (file, size, mtime) of a dataset's files -> its rows


def count_rows(attr: DatasetAttr) -> int | None:
    """The records of a local dataset as tunekit's reader reads them; None for a hub dataset, a dataset over
    :data:`MAX_COUNT_BYTES` or one that does not read (the run words that error). Remembered per file size and time."""
    if attr.load_from != "file":
        return None
    path = Path(attr.path)
    try:
        files = data_files(path) if path.is_dir() else [path]
        key = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    except OSError:
        return None
    if not key or sum(size for _p, size, _t in key) > MAX_COUNT_BYTES:
        return None
    if key not in _ROWS:
        try:
            _ROWS[key] = len(read_records(attr))
        except (TunekitError, OSError, ValueError):
            _ROWS[key] = None
        if len(_ROWS) > 512:
            _ROWS.pop(next(iter(_ROWS)))
    return _ROWS[key]


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
    return bool(model_chat_template(model_dir))


def model_chat_template(model_dir: str | None) -> str:
    """The chat template a local model folder ships (``chat_template.jinja``, ``chat_template.json``, or
    ``chat_template`` in ``tokenizer_config.json``), as text; "" when it has none."""
    if not model_dir:
        return ""
    folder = Path(model_dir)
    for name, key in (
        ("chat_template.jinja", None),
        ("chat_template.json", "chat_template"),
        ("tokenizer_config.json", "chat_template"),
    ):
        try:
            text = (folder / name).read_text(encoding="utf-8")
            value = json.loads(text).get(key) if key else text
        except (OSError, ValueError, AttributeError):
            continue
        if value:
            return value if isinstance(value, str) else json.dumps(value)
    return ""


def model_family(model_dir: str) -> tuple[str | None, str | None]:
    """``(template, family)`` of a local model folder, from its ``config.json``: the template of the media family
    serving its ``model_type`` (``data/mm_plugins``) for a vision / audio model, else the chat format of its text
    family (``tiny.text.FAMILIES`` → ``tiny.tokenizer.TOKENIZERS``); the family is its architecture's name (Qwen2).
    ``(None, family)`` when tunekit knows no template of it, ``(None, None)`` for a folder without a config."""
    model_type, multimodal = mm_plugins.model_type_of(model_dir)
    if not model_type:
        return None, None
    try:
        arch = (
            json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8")).get("architectures") or [""]
        )[0]
    except (OSError, ValueError, AttributeError, IndexError, TypeError):
        arch = ""
    family = re.sub(r"(For[A-Z]\w*|Model)$", "", str(arch)) or str(model_type)
    if not multimodal:
        text = TEXT_FAMILIES.get(str(model_type))
        return (TOKENIZERS[text.tokenizer].template if text else None), family
    for template, module in mm_plugins.FAMILIES.items():
        plugin = importlib.import_module(f"{mm_plugins.__name__}.{module}").PLUGIN
        fits = getattr(plugin, "fits", None)  # several chat formats on one model_type (LLaVA-NeXT)
        if model_type in plugin.MODEL_TYPES and (
            fits is None or fits(template, text_model_type(model_dir), model_chat_template(model_dir))
        ):
            return template, family
    return None, family


def media_of_template(template: str | None) -> tuple[str, ...]:
    """The media (``images``, ``videos``, ``audios``) the family of a multimodal template trains on; () otherwise."""
    module = mm_plugins.FAMILIES.get(template or "")
    return importlib.import_module(f"{mm_plugins.__name__}.{module}").PLUGIN.MEDIA if module else ()


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
