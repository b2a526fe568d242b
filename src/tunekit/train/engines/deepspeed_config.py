"""DeepSpeed configs: the ``deepspeed:`` option as a preset name or a JSON file, checked before any process starts.

Presets ship as package data (``tunekit/resources/deepspeed/ds_<name>_config.json``) in the shape of
LLaMA-Factory's ``examples/deepspeed`` files: batch, clipping and precision fields are ``"auto"`` so the
Hugging Face integration fills them from tunekit's options. A user's own file (LLaMA-Factory's included)
is used unchanged, except that a ZeRO-3 file that does not say ``stage3_gather_16bit_weights_on_model_save``
gets it turned on (in a copy written to ``output_dir``) so the saved model is a normal model folder.
No torch/deepspeed import here: ``tunekit train`` checks configs in the parent before launching ranks.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ...config.engines import DEEPSPEED_PRESETS
from ...config.jsonfile import read_json_object
from ...errors import ConfigError, EnvironmentProblem

PRESETS = DEEPSPEED_PRESETS  # declared once, in config/engines.py
RESOLVED_NAME = "ds_config.json"
GATHER_KEY = "stage3_gather_16bit_weights_on_model_save"


@dataclass(frozen=True)
class DeepSpeedSettings:
    """What the launcher, the planner and the checks need to know about a DeepSpeed config."""

    source: str  # preset name or the user's path
    config: dict
    stage: int
    offload_optimizer: bool
    offload_param: bool

    @property
    def gathers_16bit_weights(self) -> bool:
        return bool(self.config.get("zero_optimization", {}).get(GATHER_KEY, False))


def preset_config(name: str) -> dict:
    """The preset ``name`` (z0, z1, z2, z2_offload, z3, z3_offload) as a dict."""
    if name not in PRESETS:
        raise ConfigError(f"Unknown DeepSpeed preset {name!r}: use one of {', '.join(PRESETS)} or a path to a JSON file.")
    text = resources.files("tunekit").joinpath("resources", "deepspeed", f"ds_{name}_config.json").read_text(encoding="utf-8")
    return json.loads(text)


def read_deepspeed(value: str) -> DeepSpeedSettings:
    """Parse the ``deepspeed`` option (preset or path) with messages that say how to fix it."""
    if value in PRESETS:
        config = preset_config(value)
    else:
        path = Path(value).expanduser()
        if not path.is_file():
            hint = f" (a preset name: {', '.join(PRESETS)})" if os.sep not in value and not value.endswith(".json") else ""
            raise ConfigError(f"deepspeed: {value!r} is neither a preset{hint} nor an existing JSON file.")
        config = read_json_object(path, "deepspeed")
    zero = config.get("zero_optimization") or {}
    if not isinstance(zero, dict):
        raise ConfigError(f"deepspeed: 'zero_optimization' in {value} must be an object.")
    try:
        stage = int(zero.get("stage", 0))
    except (TypeError, ValueError):
        raise ConfigError(f"deepspeed: zero_optimization.stage in {value} must be 0, 1, 2 or 3, got {zero.get('stage')!r}.") from None
    if stage not in (0, 1, 2, 3):
        raise ConfigError(f"deepspeed: zero_optimization.stage in {value} must be 0, 1, 2 or 3, got {stage}.")
    return DeepSpeedSettings(
        source=value, config=config, stage=stage,
        offload_optimizer=_offloads(zero.get("offload_optimizer")),
        offload_param=_offloads(zero.get("offload_param")),
    )


def _offloads(section: Any) -> bool:
    return isinstance(section, dict) and str(section.get("device", "none")).lower() not in ("none", "")


def resolve_deepspeed(value: str, output_dir: str | os.PathLike) -> str:
    """The path to hand to ``TrainingArguments(deepspeed=...)``.

    Presets, and ZeRO-3 files that leave 16-bit weight gathering unset, are written to
    ``output_dir/ds_config.json`` (every rank writes the same bytes atomically); any other file is
    passed as it is, so "auto" fields and the user's own settings reach the HF integration unchanged.
    """
    settings = read_deepspeed(value)
    config = settings.config
    needs_copy = settings.source in PRESETS
    zero = config.get("zero_optimization", {})
    if settings.stage == 3 and GATHER_KEY not in zero:
        config = {**config, "zero_optimization": {**zero, GATHER_KEY: True}}
        needs_copy = True
    if not needs_copy:
        return str(Path(value).expanduser().resolve())
    out = Path(output_dir) / RESOLVED_NAME
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{RESOLVED_NAME}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    tmp.replace(out)
    return str(out.resolve())


def check_batch_fields(settings: DeepSpeedSettings, micro_batch: int, accumulation: int, world: int) -> None:
    """Numbers written in a DeepSpeed file must agree with tunekit's options and the world size.

    DeepSpeed asserts ``train_batch_size == micro * accumulation * world``; an assertion deep in its
    engine is a poor message, so the same rule is checked here, before any process starts.
    """
    cfg = settings.config
    given = {k: cfg.get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")}
    numeric = {k: v for k, v in given.items() if v not in (None, "auto")}
    if not numeric:
        return
    for key, value in numeric.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"deepspeed: {key} in {settings.source} must be a positive whole number or \"auto\", got {value!r}.")
    micro = numeric.get("train_micro_batch_size_per_gpu", micro_batch)
    accum = numeric.get("gradient_accumulation_steps", accumulation)
    if micro != micro_batch:
        raise ConfigError(
            f"deepspeed: train_micro_batch_size_per_gpu is {micro} in {settings.source} but per_device_train_batch_size is "
            f"{micro_batch}: set it to \"auto\" (recommended) or make both equal."
        )
    if accum != accumulation:
        raise ConfigError(
            f"deepspeed: gradient_accumulation_steps is {accum} in {settings.source} but gradient_accumulation_steps is "
            f"{accumulation} in tunekit's options: set it to \"auto\" (recommended) or make both equal."
        )
    total = numeric.get("train_batch_size")
    if total is not None and total != micro * accum * world:
        per_rank, rest = divmod(total, micro * world)
        fix = (f"gradient_accumulation_steps: {per_rank}" if rest == 0 and per_rank >= 1
               else f"a train_batch_size divisible by per_device_train_batch_size x world size ({micro} x {world})")
        raise ConfigError(
            f"deepspeed: train_batch_size {total} in {settings.source} is not per_device_train_batch_size x "
            f"gradient_accumulation_steps x world size = {micro} x {accum} x {world} = {micro * accum * world}. "
            f"Set train_batch_size to \"auto\" (recommended) or use {fix}."
        )


def require_deepspeed(settings: DeepSpeedSettings, on_gpu: bool) -> None:
    """DeepSpeed, and the compiled ops a config needs, must be usable before ranks start."""
    if not _installed("deepspeed"):
        raise EnvironmentProblem(
            f"deepspeed: {settings.source} needs the DeepSpeed package, which is not installed: "
            "pip install 'tunekit[deepspeed]' (or pip install deepspeed), or remove the deepspeed option."
        )
    if settings.offload_optimizer and not _can_build_ops():
        raise EnvironmentProblem(
            f"deepspeed: {settings.source} offloads the optimizer to the CPU, which needs DeepSpeed's CPU Adam op; "
            "it is built on first use and that needs a C++ compiler (c++/g++) and ninja, not found here. Install them "
            "(e.g. apt-get install build-essential; pip install ninja), or use a config without offload (z2, z3)."
        )
    if not on_gpu and not _can_build_ops():
        raise EnvironmentProblem(
            "deepspeed on CPU builds its shared-memory communication op on first use, which needs a C++ compiler and "
            "ninja, not found here: install them (apt-get install build-essential; pip install ninja)."
        )


def _installed(name: str) -> bool:
    from importlib.util import find_spec

    try:
        return find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _can_build_ops() -> bool:
    import shutil
    from importlib.util import find_spec

    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    ninja = shutil.which("ninja") or find_spec("ninja") is not None
    return bool(compiler and ninja) or _ops_prebuilt()


def _ops_prebuilt() -> bool:
    """True when the ops were compiled into the DeepSpeed install (DS_BUILD_OPS=1)."""
    from importlib.util import find_spec

    spec = find_spec("deepspeed")
    if spec is None or not spec.submodule_search_locations:
        return False
    ops = Path(list(spec.submodule_search_locations)[0]) / "ops"
    return any(ops.rglob("cpu_adam*.so"))
