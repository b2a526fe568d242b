"""Keyed messages: a sentence that is its English text (a ``str``) and keeps the key and values it was made of.

One mechanism for every message another language must say again: the planner's notes (``plan/notes.py``) and the
config's problems (``config/problems.py``, their templates in ``config/problem_texts.py``). A subclass of
:class:`Keyed` names its English table (key → template) and its joins (placeholder → how a tuple is joined in
English); :func:`render` says a message with any language's templates, from the key and the values, never by reading
the English back.

A value is a number (shown with the template's format spec), a name or a path (a ``str``, shown as it is), ``None``
(an optional tail left out: shown as nothing), another keyed message (a part that varies in words) or a tuple of
those, joined the way the table's joins say for that placeholder. This module is a top-level helper (like
``errors`` and ``env``: it imports nothing of tunekit), so that every layer may use it, and ``env.py``'s own errors
(:class:`tunekit.env.EnvSaid`) are keyed too.
"""

from __future__ import annotations

import numbers
import string
from collections.abc import Callable, Mapping
from typing import Any, ClassVar


def merged(*tables: Mapping[str, str]) -> dict[str, str]:
    """One language's templates from its tables, each key from one table only: a key two tables define would
    silently say the later table's sentence where the earlier one's is meant."""
    out: dict[str, str] = {}
    for table in tables:
        if clash := sorted(out.keys() & table.keys()):
            raise KeyError(f"message keys defined twice: {', '.join(clash)}")
        out.update(table)
    return out


def placeholders(template: str) -> set[tuple[str, str]]:
    """``{(name, format spec)}`` of a template: what a translation of it must take."""
    return {(name, spec or "") for _text, name, spec, _conv in string.Formatter().parse(template) if name is not None}


def render(message: Mapping[str, Any], template: Callable[[str], str], join: Callable[[str], Any]) -> str:
    """A message in its JSON form (:meth:`Keyed.to_json`) said with ``template(key)`` and ``join(placeholder)`` (a
    separator, or ``(separator, before the last)`` for a list said as "a, b and c")."""
    values = {name: _said(name, value, template, join) for name, value in message["values"].items()}
    return template(message["key"]).format(**values)


def _said(name: str, value: Any, template: Callable[[str], str], join: Callable[[str], Any]) -> Any:
    if value is None:
        return ""
    if isinstance(value, Mapping):
        return render(value, template, join)
    if isinstance(value, list):
        items = [str(_said(name, item, template, join)) for item in value]
        sep = join(name)
        if isinstance(sep, tuple):  # (between, before the last): "a, b and c"
            return sep[0].join(items[:-1]) + sep[1] + items[-1] if len(items) > 1 else "".join(items)
        return sep.join(items)
    return value


def as_json(value: Any, owner: type | None = None) -> Any:
    """A value as plain JSON: a keyed message as its key and values, a tuple as a list, a NumPy number as a
    Python one (``owner``: the keyed class whose value it is, named in the error)."""
    if isinstance(value, Keyed):
        return value.to_json()
    if isinstance(value, (tuple, list)):
        return [as_json(item, owner) for item in value]
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    kind = (owner or Keyed).__name__
    raise TypeError(f"a {kind.lower()}'s value is a number, a str, None, a {kind} or a tuple of them, got {value!r}")


class Keyed(str):
    """A message made from ``ENGLISH[key]`` and ``values``; ``.key`` and ``.values`` keep what it was made of.

    A subclass sets ``ENGLISH`` (key → English template), ``JOINS`` (placeholder → English join of a tuple) and
    ``WHERE`` (where the table lives, for the error about a missing key)."""

    ENGLISH: ClassVar[Mapping[str, str]] = {}
    JOINS: ClassVar[Mapping[str, str | tuple[str, str]]] = {}
    WHERE: ClassVar[str] = ""

    key: str
    values: dict[str, Any]

    def __new__(cls, key: str, /, **values: Any) -> Keyed:
        if key not in cls.ENGLISH:
            raise KeyError(f"no English template for the {cls.__name__.lower()} key {key!r} in {cls.WHERE}")
        wanted = {name for name, _spec in placeholders(cls.ENGLISH[key])}
        if set(values) != wanted:
            raise TypeError(f"{cls.__name__.lower()} {key!r} takes the values {sorted(wanted)}, got {sorted(values)}")
        data = {"key": key, "values": {name: as_json(value, cls) for name, value in values.items()}}
        self = super().__new__(cls, render(data, cls.ENGLISH.__getitem__, cls.JOINS.__getitem__))
        self.key, self.values = key, values
        return self

    def __reduce__(self):  # pickle and copy make it again from its key and values
        return _remake, (type(self), self.key, self.values)

    def to_json(self) -> dict[str, Any]:
        """``{"key": ..., "values": {...}}``: nested messages as the same, tuples as lists, numbers as given."""
        return {"key": self.key, "values": {name: as_json(value) for name, value in self.values.items()}}


def _remake(cls: type[Keyed], key: str, values: dict[str, Any]) -> Keyed:
    return cls(key, **values)
