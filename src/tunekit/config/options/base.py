"""Shared base for option groups.

Every option is a pydantic field with a type, a default and a one-line ``description``; the group a
field belongs to is the class that declares it (``GROUP``). The CLI help, YAML validation, the web
board's form and ``docs/options.md`` are all generated from these classes.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict


class OptionGroup(BaseModel):
    """A named group of options (a mixin of :class:`tunekit.config.Config`)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=())

    GROUP: ClassVar[str] = "other"
    TITLE: ClassVar[str] = "Other"
