"""Validate form values with the schema and attach each problem to the option(s) it names.

The schema's rules name their fields themselves (:class:`tunekit.config.problems.Problem`, carried by the
:class:`~tunekit.errors.ConfigError`), so nothing here reads field names out of the message text. A problem that
names no field (a rule not converted yet, or an error about the config as a whole) is shown in the message box only.
The DeepSpeed file against the options (:func:`check_deepspeed`) is the check ``tunekit train`` makes before it
launches (``train/preflight.py``); the board applies it once its path policy has allowed the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tunekit.config import Config, build_config
from tunekit.config.lists import split_list
from tunekit.config.problems import Problem, problems_text
from tunekit.config.schema import run_problems
from tunekit.errors import ConfigError
from tunekit.train.engines import distributed
from tunekit.train.engines.deepspeed_config import PRESETS, check_options, read_deepspeed


@dataclass
class Validation:
    config: Config | None
    message: str = ""
    by_field: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.config is not None


def problems_by_field(problems: Iterable) -> dict[str, list[str]]:
    """Option name → the messages of the problems that name it, in order."""
    by_field: dict[str, list[str]] = {}
    for problem in problems:
        for name in problem.fields:
            by_field.setdefault(name, []).append(problem.message)
    return by_field


def validate(values: Mapping[str, Any]) -> Validation:
    """Build the config the form stands for, then apply the rules of a training run (the board starts runs); on
    failure, each problem goes to the fields it names."""
    try:
        cfg = build_config(dict(values), dict.fromkeys(values, "in the form"))
    except ConfigError as exc:
        return Validation(None, str(exc), problems_by_field(exc.problems))
    problems = [*run_problems(cfg), *repeated_datasets(cfg)]
    if problems:
        return Validation(None, problems_text(problems), problems_by_field(problems))
    return Validation(cfg)


def repeated_datasets(cfg: Config) -> list[Problem]:
    """A dataset picked twice (the board's pickers list each dataset once; ``tunekit train dataset=a,a`` from a shell
    is not refused, a deliberate way to read a dataset twice)."""
    out = []
    for option in ("dataset", "eval_dataset"):
        names = split_list(getattr(cfg, option))
        twice = [name for i, name in enumerate(names) if name in names[:i]]
        if twice:
            out.append(
                Problem(
                    f"{option}: '{twice[0]}' is chosen twice, so a run would read its samples twice: pick each "
                    f"dataset once.",
                    (option,),
                )
            )
    return out


def check_deepspeed(check: Validation, workspace: str | Path) -> Validation:
    """``check`` unless its config's ``deepspeed`` (a preset, or a JSON file: a relative path is read in the
    ``workspace``, where the job runs) contradicts the options: then the preflight's error, at the deepspeed field.
    Call it after the path policy allowed the file (it reads it)."""
    cfg = check.config
    if cfg is None or not cfg.deepspeed:
        return check
    value = str(cfg.deepspeed)
    path = value if value in PRESETS else str(Path(workspace, Path(value).expanduser()))
    try:
        settings = replace(read_deepspeed(path), source=value)  # named as the job names it
        check_options(settings, cfg, distributed.world_size(cfg))
    except ConfigError as exc:
        return Validation(None, str(exc), {"deepspeed": [str(exc)]})
    return check
