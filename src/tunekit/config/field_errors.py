"""pydantic's error about one option as a keyed sentence (:class:`~tunekit.config.problems.Said`).

The loader (``config/loader.py``) reports a field's error as "Option 'x' (where) got v (type), expected T: <detail>",
the detail being pydantic's English. :func:`detail` makes that detail a keyed part chosen by pydantic's error
``type`` with the values of its ``ctx``, so that the board says it in Chinese; it is used only where its English is
exactly pydantic's message (otherwise the message is kept whole, as ``pydantic_other``), so the CLI's text is
pydantic's, word for word. A field validator that raises ``ValueError(Said(...))`` (``options/base.py``) gives its
own keyed sentence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .problem_texts import ENGLISH
from .problems import Said

# pydantic error type → the ctx entries its English template takes (types not named here take none)
_CTX = {
    "greater_than": ("gt",),
    "greater_than_equal": ("ge",),
    "less_than": ("lt",),
    "less_than_equal": ("le",),
    "multiple_of": ("multiple_of",),
}


def _number(value: Any) -> Any:
    """A bound as pydantic writes it: 0.0 as 0."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def detail(err: Mapping[str, Any], msg: str, choices: tuple = ()) -> Said:
    """``msg`` (pydantic's message for ``err``, "Value error, " removed) as a keyed part; ``choices``: the field's
    Literal choices (a literal_error is said from them)."""
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    error = ctx.get("error")
    if isinstance(error, ValueError) and error.args and isinstance(error.args[0], Said):
        return error.args[0]
    key = f"pydantic_{kind}"
    said = None
    if kind == "literal_error" and choices:
        said = Said(key, choices=tuple(repr(c) for c in choices))
    elif key in ENGLISH and all(name in ctx for name in _CTX.get(kind, ())):
        said = Said(key, **{name: _number(ctx[name]) for name in _CTX.get(kind, ())})
    return said if said is not None and said == msg else Said("pydantic_other", msg=msg)
