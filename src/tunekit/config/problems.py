"""A problem with a config: the message a user reads and the options it concerns.

Every cross-field rule (``config/schema.py``, ``config/engines.py``, ``config/method_rules.py``, the groups' own
rule functions in ``config/options/``) yields a :class:`Problem` naming its fields, so the web board shows each
message next to those options without guessing them from the text. :class:`~tunekit.errors.ConfigError` carries
the problems of a refused config as ``.problems``; its message is the problems' messages, one per line.

A problem's message is a :class:`Said`: its English sentence (a ``str``, what the CLI prints and the logs keep)
made from a key of :data:`tunekit.config.problem_texts.ENGLISH` and values, so that the web board says it again in
another language from the key and the values (``webui/problems_zh.py``). :func:`problem` makes one.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..messages import Keyed
from .problem_texts import ENGLISH, JOINS

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4
_REPR.maxlevel = 2


def excerpt(value: Any) -> str:
    """A short, escaped rendering of a user value for messages (never the whole of a huge value)."""
    return _REPR.repr(value)


class Said(Keyed):
    """A problem's sentence: ``ENGLISH[key]`` filled with ``values`` (a ``str``, the English text)."""

    ENGLISH = ENGLISH
    JOINS = JOINS
    WHERE = "tunekit.config.problem_texts.ENGLISH"


@dataclass(frozen=True)
class Problem:
    """``message`` (complete: what is wrong and how to fix it) about the options ``fields`` (empty: the whole
    config)."""

    message: str
    fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.fields, str):  # Problem(msg, "bf16") would read as the fields b, f, 1, 6
            raise TypeError(f"Problem fields must be a tuple of option names, got the string {self.fields!r}")
        object.__setattr__(self, "fields", tuple(dict.fromkeys(self.fields)))

    def __str__(self) -> str:
        return self.message


def problem(key: str, fields: tuple[str, ...] = (), /, **values: Any) -> Problem:
    """``Problem(Said(key, **values), fields)``: the problem whose English is ``ENGLISH[key]`` filled in."""
    return Problem(Said(key, **values), fields)


def config_error(key: str, fields: tuple[str, ...] = (), /, **values: Any) -> ConfigError:
    """The :class:`~tunekit.errors.ConfigError` (to raise) of the one :func:`problem` ``key`` about ``fields``."""
    item = problem(key, fields, **values)
    return ConfigError(item.message, [item])


def message_of(exc: BaseException) -> str:
    """An error's message as a value of another message: its keyed message (said again in any language), else its
    text as it is."""
    first = exc.args[0] if exc.args else ""
    return first if isinstance(first, Keyed) and str(first) == str(exc) else str(exc)


def as_problem(item: Problem | str) -> Problem:
    """The one adapter for a rule that still yields a bare string: a problem of the whole config (no fields).

    ``tests/config/test_rule_fields.py`` lists such rules; give them their fields by yielding a :class:`Problem`."""
    return item if isinstance(item, Problem) else Problem(str(item))


def problems_text(problems: Iterable[Problem]) -> str:
    """The message a user reads: one line per problem, repeats dropped."""
    return "\n".join(dict.fromkeys(p.message for p in problems))


class ProblemsError(ValueError):
    """Raised inside the schema's validator (pydantic wraps it in a ``ValidationError`` and keeps it as the error's
    ``ctx["error"]``): the loader turns it back into a :class:`~tunekit.errors.ConfigError` with the same problems."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems = tuple(problems)
        super().__init__(problems_text(self.problems))
