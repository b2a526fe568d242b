"""Shared base for option groups.

Every option is a pydantic field with a type, a default and a one-line ``description``; the group a
field belongs to is the class that declares it (``GROUP``). The CLI help, YAML validation, the web
board's form and ``docs/options.md`` are all generated from these classes.

Value rules that hold for every option live here, once, so a field added to any group gets them:
numbers must be finite (``.inf``/``.nan`` would train to NaN weights and still exit 0) and whole numbers
must fit the signed 64-bit integers torch and the data loader count with (``10**30`` ends in an
``islice``/tensor traceback). The rule also looks inside mapping and list values
(``lr_scheduler_kwargs: {min_lr_rate: .nan}``).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, field_validator

from ..problems import Said

INT64_MAX = 2**63 - 1


def check_number(value: Any, where: str = "") -> None:
    """Raise ``ValueError`` if ``value`` (or anything inside a mapping/list) is a non-finite float or an
    integer outside int64; ``where`` names the nested key in the message."""
    if isinstance(value, bool):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(Said("number_not_finite", where=where, value=str(value)))
    if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ValueError(Said("number_too_large", where=where, value=str(value), limit=INT64_MAX))
    if isinstance(value, dict):
        for key, item in value.items():
            check_number(item, f"{where}{key}: ")
    elif isinstance(value, (list, tuple)):
        for item in value:
            check_number(item, where)


class OptionGroup(BaseModel):
    """A named group of options (a mixin of :class:`tunekit.config.Config`)."""

    # allow_inf_nan=False: pydantic refuses inf/nan (also the strings "inf"/"nan") while parsing every float field.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=(), allow_inf_nan=False)

    GROUP: ClassVar[str] = "other"
    TITLE: ClassVar[str] = "Other"

    @field_validator("*", mode="after")
    @classmethod
    def _finite_and_in_range(cls, value: Any) -> Any:
        check_number(value)
        return value
