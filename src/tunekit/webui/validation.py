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
from tunekit.config.problems import Problem, Said, problem, problems_text
from tunekit.config.schema import run_problems
from tunekit.errors import ConfigError
from tunekit.train.engines import distributed
from tunekit.train.engines.deepspeed_config import PRESETS, check_options, read_deepspeed

from .problems_zh import say


@dataclass
class Validation:
    """The config the form stands for, or why not: ``message`` (English, one problem a line), ``by_field`` (option →
    its problems' messages) and ``lines`` (the problems' messages, keyed where the rule made them so: :meth:`text`
    and :meth:`field_text` say them in the page's language)."""

    config: Config | None
    message: str = ""
    by_field: dict[str, list[str]] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.config is not None

    def text(self, lang: str) -> str:
        """The message in ``lang``: one problem a line, repeats dropped."""
        if not self.lines:
            return self.message
        return "\n".join(dict.fromkeys(say(line, lang) for line in self.lines))

    def field_text(self, name: str, lang: str) -> list[str]:
        """The messages of the problems that name option ``name``, in ``lang``."""
        return [say(message, lang) for message in self.by_field.get(name, ())]


def refused(problems: Iterable[Problem]) -> Validation:
    """A failed check made of ``problems`` (each at the fields it names)."""
    problems = list(problems)
    return Validation(None, problems_text(problems), problems_by_field(problems), [p.message for p in problems])


def problems_by_field(problems: Iterable) -> dict[str, list[str]]:
    """Option name → the messages of the problems that name it, in order."""
    by_field: dict[str, list[str]] = {}
    for item in problems:
        for name in item.fields:
            by_field.setdefault(name, []).append(item.message)
    return by_field


def validate(values: Mapping[str, Any]) -> Validation:
    """Build the config the form stands for, then apply the rules of a training run (the board starts runs); on
    failure, each problem goes to the fields it names."""
    try:
        cfg = build_config(dict(values), dict.fromkeys(values, Said("where_form")))
    except ConfigError as exc:
        lines = [p.message for p in exc.problems] or [str(exc)]
        return Validation(None, str(exc), problems_by_field(exc.problems), lines)
    problems = [*run_problems(cfg), *repeated_datasets(cfg)]
    if problems:
        return refused(problems)
    return Validation(cfg)


def repeated_datasets(cfg: Config) -> list[Problem]:
    """A dataset picked twice (the board's pickers list each dataset once; ``tunekit train dataset=a,a`` from a shell
    is not refused, a deliberate way to read a dataset twice)."""
    out = []
    for option in ("dataset", "eval_dataset"):
        names = split_list(getattr(cfg, option))
        twice = [name for i, name in enumerate(names) if name in names[:i]]
        if twice:
            out.append(problem("dataset_twice", (option,), option=option, name=twice[0]))
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
    except ConfigError as exc:  # its problems are keyed: said in the page's language at the deepspeed field
        if exc.problems:
            return refused(exc.problems)
        return Validation(None, str(exc), {"deepspeed": [str(exc)]}, [str(exc)])
    return check
