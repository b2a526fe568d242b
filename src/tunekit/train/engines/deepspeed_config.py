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
from ...config.problems import Said, config_error
from ...config.schema import Config
from ...errors import EnvironmentProblem

PRESETS = DEEPSPEED_PRESETS  # declared once, in config/engines.py
RESOLVED_NAME = "ds_config.json"
GATHER_KEY = "stage3_gather_16bit_weights_on_model_save"
_FIELDS = ("deepspeed",)  # the option a refusal of the file concerns (the board shows it there)


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
        raise config_error("ds_unknown_preset", _FIELDS, name=repr(name), presets=tuple(PRESETS))
    text = (
        resources.files("tunekit")
        .joinpath("resources", "deepspeed", f"ds_{name}_config.json")
        .read_text(encoding="utf-8")
    )
    return json.loads(text)


def read_deepspeed(value: str) -> DeepSpeedSettings:
    """Parse the ``deepspeed`` option (preset or path) with messages that say how to fix it."""
    if value in PRESETS:
        config = preset_config(value)
    else:
        path = Path(value).expanduser()
        if not path.is_file():
            hint = (
                Said("part_ds_preset_hint", presets=tuple(PRESETS))
                if os.sep not in value and not value.endswith(".json")
                else None
            )
            raise config_error("ds_not_found", _FIELDS, value=repr(value), hint=hint)
        config = read_json_object(path, "deepspeed")
    zero = config.get("zero_optimization") or {}
    if not isinstance(zero, dict):
        raise config_error("ds_zero_not_object", _FIELDS, source=value)
    try:
        stage = int(zero.get("stage", 0))
    except (TypeError, ValueError):
        stage = None
    if stage not in (0, 1, 2, 3):
        raise config_error(
            "ds_stage", _FIELDS, source=value, stage=repr(zero.get("stage")) if stage is None else str(stage)
        )
    return DeepSpeedSettings(
        source=value,
        config=config,
        stage=stage,
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
    """The batch numbers written in a DeepSpeed file must agree with tunekit's options and the world size (DeepSpeed
    asserts ``train_batch_size == micro * accumulation * world`` deep in its engine); see :func:`option_conflicts`."""
    _raise_conflicts(settings, batch_conflicts(settings, micro_batch, accumulation, world))


def check_options(settings: DeepSpeedSettings, cfg: Config, world: int) -> None:
    """Every field of the file that contradicts ``cfg`` (and ``world``), in one error: see :func:`option_conflicts`."""
    _raise_conflicts(settings, option_conflicts(settings, cfg, world))


def _raise_conflicts(settings: DeepSpeedSettings, conflicts: list[str]) -> None:
    if conflicts:
        numbered = tuple(Said("part_ds_numbered", n=i, text=text) for i, text in enumerate(conflicts, 1))
        raise config_error("ds_contradicts", _FIELDS, source=settings.source, count=len(conflicts), conflicts=numbered)


def batch_conflicts(settings: DeepSpeedSettings, micro_batch: int, accumulation: int, world: int) -> list[str]:
    """The batch fields of the file that are numbers and differ from the options (``train_batch_size`` must be
    ``micro x accumulation x world``); a field that is not a positive whole number or ``"auto"`` is an error."""
    cfg = settings.config
    given = {
        k: cfg.get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    }
    numeric = {k: v for k, v in given.items() if v not in (None, "auto")}
    for key, value in numeric.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise config_error("ds_batch_field", _FIELDS, key=key, source=settings.source, value=repr(value))
    out = []
    micro = numeric.get("train_micro_batch_size_per_gpu", micro_batch)
    accum = numeric.get("gradient_accumulation_steps", accumulation)
    if micro != micro_batch:
        out.append(Said("part_ds_micro", micro=micro, micro_batch=micro_batch))
    if accum != accumulation:
        out.append(Said("part_ds_accum", accum=accum, accumulation=accumulation))
    total = numeric.get("train_batch_size")
    if total is not None and total != micro * accum * world:
        per_rank, rest = divmod(total, micro * world)
        fix = (
            Said("part_ds_fix_accum", per_rank=per_rank)
            if rest == 0 and per_rank >= 1
            else Said("part_ds_fix_divisible", micro=micro, world=world)
        )
        product = micro * accum * world
        out.append(Said("part_ds_total", total=total, micro=micro, accum=accum, world=world, product=product, fix=fix))
    return out


# (field of the DeepSpeed file, tunekit option(s), the option's value): what transformers' HfTrainerDeepSpeedConfig
# fills where the file says "auto" and otherwise compares (it reports a mismatch only after the model has loaded).
def _matched_fields(cfg: Config) -> list[tuple[str, str, Any]]:
    return [
        ("gradient_clipping", "max_grad_norm", cfg.max_grad_norm),
        ("optimizer.params.lr", "learning_rate", cfg.learning_rate),
        ("optimizer.params.betas", "adam_beta1, adam_beta2", [cfg.adam_beta1, cfg.adam_beta2]),
        ("optimizer.params.eps", "adam_epsilon", cfg.adam_epsilon),
        ("optimizer.params.weight_decay", "weight_decay", cfg.weight_decay),
        ("scheduler.params.warmup_max_lr", "learning_rate", cfg.learning_rate),
        ("fp16.enabled", "fp16", bool(cfg.fp16)),
        ("bf16.enabled", "bf16", bool(cfg.bf16)),
    ]


def field(config: dict, dotted: str) -> Any:
    """``config["a"]["b"]`` for ``"a.b"``; None where a level is missing."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def option_conflicts(settings: DeepSpeedSettings, cfg: Config, world: int) -> list[str]:
    """Each field of the file that is not ``"auto"`` and differs from the option it stands for (the batch numbers,
    clipping, optimizer and scheduler parameters, fp16/bf16), as one phrase each."""
    out = batch_conflicts(settings, cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps, world)
    for key, option, value in _matched_fields(cfg):
        given = field(settings.config, key)
        if given is None or given == "auto":
            continue
        lists = isinstance(value, list) and isinstance(given, (list, tuple))
        if (list(given) if lists else given) != value:
            shown = json.dumps(given) if not isinstance(given, str) else repr(given)
            mine = json.dumps(value) if isinstance(value, (bool, list)) else value
            out.append(Said("part_ds_field", key=key, given=shown, option=option, mine=str(mine)))
    tp = field(settings.config, "tensor_parallel.autotp_size")
    if isinstance(tp, int) and tp > 1 and world % tp:
        out.append(Said("part_ds_autotp", tp=tp, world=world))
    custom = [name for name in CUSTOM_OPTIMIZERS if getattr(cfg, name, False)]
    if custom and isinstance(settings.config.get("optimizer"), dict):
        out.append(Said("part_ds_optimizer", optimizers=tuple(custom), first=custom[0]))
    return out


# the options that build tunekit's own optimizer (train/optimizers.py: uses_custom_optimizer; a test holds them equal)
CUSTOM_OPTIMIZERS = ("use_galore", "use_apollo", "use_badam", "use_adam_mini", "use_muon")


def require_deepspeed(settings: DeepSpeedSettings, on_gpu: bool) -> None:
    """DeepSpeed, and the compiled ops a config needs, must be usable before ranks start."""
    if not _installed("deepspeed"):
        raise EnvironmentProblem(Said("ds_not_installed", source=str(settings.source)))
    if settings.offload_optimizer and not _can_build_ops():
        raise EnvironmentProblem(Said("ds_offload_no_compiler", source=str(settings.source)))
    if not on_gpu and not _can_build_ops():
        raise EnvironmentProblem(Said("ds_cpu_no_compiler"))


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


# ------------------------------------------------------------------ what a DeepSpeed file runs instead of the options
_AUTO_PARAMS = {  # what transformers fills for "auto" (HfTrainerDeepSpeedConfig), as the options say it
    "optimizer": lambda cfg: {
        "lr": cfg.learning_rate,
        "betas": [cfg.adam_beta1, cfg.adam_beta2],
        "eps": cfg.adam_epsilon,
        "weight_decay": cfg.weight_decay,
    },
    "scheduler": lambda cfg: {
        "warmup_min_lr": 0,
        "warmup_max_lr": cfg.learning_rate,
        "warmup_num_steps": "the run's warm-up steps",
        "total_num_steps": "the run's steps",
    },
}
# the option each block replaces: transformers hands the step to DeepSpeed's optimizer / schedule, never builds these
_REPLACED = {"optimizer": ("optim", "optimizer"), "scheduler": ("lr_scheduler_type", "learning-rate schedule")}


def takeovers(settings: DeepSpeedSettings, cfg: Config) -> dict[str, str]:
    """``{option: what runs instead}`` for each block of the file that replaces an option (``optimizer`` replaces
    ``optim``, ``scheduler`` replaces ``lr_scheduler_type`` and ``lr_scheduler_kwargs``), with the block's type and
    parameters as they run ("auto" filled from the options, as transformers fills it)."""
    out = {}
    for block, (option, what) in _REPLACED.items():
        section = settings.config.get(block)
        if not isinstance(section, dict):
            continue
        params = dict(section.get("params") or {})
        filled = _AUTO_PARAMS[block](cfg)
        params = {k: (filled.get(k, v) if v == "auto" else v) for k, v in params.items()}
        shown = ", ".join(f"{k}={v}" for k, v in params.items())
        out[option] = (
            f"not used: the {block} block of {settings.source} runs DeepSpeed's {section.get('type', '?')} "
            f"({shown or 'its defaults'}) as the {what}"
        )
    return out


def takeover_lines(settings: DeepSpeedSettings, cfg: Config) -> list[str]:
    """One line per replaced option, for the start of a run."""
    return [
        f"deepspeed: {option}: {getattr(cfg, option)} is {note}" for option, note in takeovers(settings, cfg).items()
    ]
