"""Validate form values with the schema and attach each problem to the option(s) it names.

The schema's rules name their fields themselves (:class:`tunekit.config.problems.Problem`, carried by the
:class:`~tunekit.errors.ConfigError`), so nothing here reads field names out of the message text. A problem that
names no field (a rule not converted yet, or an error about the config as a whole) is shown in the message box only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from tunekit.config import Config, build_config
from tunekit.config.problems import problems_text
from tunekit.config.schema import run_problems
from tunekit.errors import ConfigError


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
        cfg = build_config(dict(values), {k: "in the form" for k in values})
    except ConfigError as exc:
        return Validation(None, str(exc), problems_by_field(exc.problems))
    problems = list(run_problems(cfg))
    if problems:
        return Validation(None, problems_text(problems), problems_by_field(problems))
    return Validation(cfg)
