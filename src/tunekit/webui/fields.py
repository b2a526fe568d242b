"""Schema → form: one :class:`FieldSpec` per config option, and the conversions form ⇄ config.

Nothing here imports gradio: the specs say which kind of widget an option needs and how its value is
shown in the form and read back, so the board's form follows the schema without per-option code, and
the round trip form ⇄ config is testable without a browser.

Form values (what the widgets hold):
- ``bool``      → a checkbox: True/False.
- ``tristate``  → Optional[bool]: a dropdown of ``""`` (unset), ``"true"``, ``"false"``.
- ``choice``    → Literal (optionally Optional): a dropdown of the choices as text (``""`` = unset).
- ``int``       → a text box holding a whole number (``""`` = None when Optional; a number box
                  cannot hold "unset": the browser sends 0).
- ``float``     → a text box (``5e-5`` is typed and shown exactly; ``""`` = None when Optional). A float option that
                  counts steps (``logging_steps``: a whole count or a share below 1) is an int when whole.
- ``text``      → str: a text box (``""`` = None when Optional).
- ``yaml``      → anything else (dicts, unions): a text box holding a YAML value.
- ``multi``     → a comma-separated str the board offers as a multi-select picker (datasets): a list.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from pydantic_core import PydanticUndefined

from tunekit.config import iter_fields, parse_scalar
from tunekit.config.lists import split_list
from tunekit.config.options.facts import OptionFacts, option_facts, option_help
from tunekit.config.schema import Config

Kind = Literal["bool", "tristate", "choice", "int", "float", "text", "yaml", "multi"]

# Comma-separated options picked from a list (dataset_info.json) rather than typed.
MULTI_PICK = ("dataset", "eval_dataset")


@dataclass(frozen=True)
class FieldSpec:
    name: str
    group: str  # the option group's GROUP
    group_title: str
    kind: Kind
    default: Any
    description: str
    optional: bool
    choices: tuple[Any, ...] = field(default=())  # Literal values (typed), for kind == "choice"
    facts: OptionFacts = field(default=OptionFacts())  # board section, "LoRA only", ... (config/options/facts.py)

    @property
    def has_default(self) -> bool:
        return self.default is not PydanticUndefined

    @property
    def choice_labels(self) -> list[str]:
        """Dropdown values (text); ``""`` stands for unset."""
        if self.kind == "tristate":
            return ["", "true", "false"]
        labels = [str(c) for c in self.choices]
        return ([""] + labels) if self.optional else labels

    @property
    def section(self) -> str:
        """The board section: the option's own (``option(section=...)``), else its group's."""
        return self.facts.section or self.group

    def help(self, description: str | None = None, lang: str = "en") -> str:
        """``description`` (default: the schema's, English) with the option's note and default, as the CLI writes
        it."""
        return option_help(self.description if description is None else description, self.default, self.facts, lang)


def _unwrap_optional(annotation) -> tuple[Any, bool]:
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        # several types are left: no one widget fits them (classify: "yaml"), so the annotation stands for them
        return (args[0] if len(args) == 1 else annotation), optional
    return annotation, False


def classify(annotation) -> tuple[Kind, bool, tuple[Any, ...]]:
    """(kind, optional, literal choices) for a field annotation."""
    inner, optional = _unwrap_optional(annotation)
    if inner is bool:
        return ("tristate" if optional else "bool"), optional, ()
    if typing.get_origin(inner) is Literal:
        return "choice", optional, tuple(typing.get_args(inner))
    if inner is int:
        return "int", optional, ()
    if inner is float:
        return "float", optional, ()
    if inner is str:
        return "text", optional, ()
    return "yaml", optional, ()


def field_specs(groups: Iterable | None = None, multi: Iterable[str] = MULTI_PICK) -> list[FieldSpec]:
    """Every option in display order (``groups`` defaults to the schema's groups)."""
    if groups is None:
        triples = iter_fields()
    else:
        triples = ((g, name, info) for g in groups for name, info in g.model_fields.items())
    specs = []
    for group, name, info in triples:
        kind, optional, choices = classify(info.annotation)
        if kind == "text" and name in multi:
            kind = "multi"
        specs.append(
            FieldSpec(
                name=name,
                group=getattr(group, "GROUP", "other"),
                group_title=getattr(group, "TITLE", "Other"),
                kind=kind,
                default=info.default,
                description=info.description or "",
                optional=optional,
                choices=choices,
                facts=option_facts(info),
            )
        )
    return specs


def _yaml_text(value: Any) -> str:
    """A one-line YAML value that :func:`parse_scalar` reads back as ``value``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if parse_scalar(value) == value and isinstance(parse_scalar(value), str) else json.dumps(value)
    return json.dumps(value, ensure_ascii=False)


def to_form(spec: FieldSpec, value: Any) -> Any:
    """Config value → what the widget holds."""
    if spec.kind == "bool":
        return bool(value)
    if spec.kind == "tristate":
        return "" if value is None else ("true" if value else "false")
    if spec.kind == "choice":
        return "" if value is None else str(value)
    if spec.kind == "int":
        return "" if value is None else str(int(value))
    if spec.kind == "float":
        return "" if value is None else repr(float(value))
    if spec.kind == "text":
        return "" if value is None else str(value)
    if spec.kind == "multi":
        return split_list(value)
    return _yaml_text(value)


def counts_steps(spec: FieldSpec) -> bool:
    """A float option that counts optimizer steps (``logging_steps``, ``save_steps``, ``eval_steps``,
    ``warmup_steps``): a whole step count, or a fraction below 1 (a share of the run's steps), as Hugging Face reads
    them. Its whole value is an int (``logging_steps=5``, never ``5.0``)."""
    return spec.kind == "float" and spec.name.endswith("_steps")


def _number(spec: FieldSpec, value: float) -> int | float:
    """A float option's value: an int where the option counts steps and the value is whole."""
    return int(value) if counts_steps(spec) and value.is_integer() else value


def from_form(spec: FieldSpec, raw: Any) -> Any:
    """Widget value → config value (pydantic validates it afterwards and words any error)."""
    if spec.kind == "bool":
        return bool(raw)
    if spec.kind == "tristate":
        return None if raw in ("", None) else str(raw).lower() == "true"
    if spec.kind == "choice":
        if raw in ("", None):
            return None
        for choice in spec.choices:
            if str(choice) == str(raw):
                return choice
        return raw  # not a choice: let the schema say what is allowed
    if spec.kind == "int":
        text = "" if raw is None else str(raw).strip()
        if text == "":
            return None
        value = parse_scalar(text)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value
    if spec.kind == "float":
        text = "" if raw is None else str(raw).strip()
        if text == "":
            return None
        value = parse_scalar(text)
        return _number(spec, float(value)) if isinstance(value, (int, float)) and not isinstance(value, bool) else text
    if spec.kind == "text":
        text = "" if raw is None else str(raw)
        return None if (text == "" and spec.optional) else text
    if spec.kind == "multi":
        parts = [raw] if isinstance(raw, str) else list(raw or [])
        joined = ",".join(str(p).strip() for p in parts if str(p).strip())
        return joined if joined or not spec.optional else None
    text = "" if raw is None else str(raw).strip()
    return None if text == "" else parse_scalar(text)


def _same(a: Any, b: Any) -> bool:
    return (
        type(a) is type(b)
        and a == b
        or (
            isinstance(a, (int, float))
            and isinstance(b, (int, float))
            and not isinstance(a, bool)
            and not isinstance(b, bool)
            and a == b
        )
    )


def form_to_values(specs: Iterable[FieldSpec], form: dict[str, Any]) -> dict[str, Any]:
    """The options a form sets: every field whose value differs from the schema default.

    Only those go into the command and the YAML (like a hand-written config), so cross-field rules
    that look at what was given (LoRA options with finetuning_type: full, ...) see what the user set.
    """
    values: dict[str, Any] = {}
    for spec in specs:
        if spec.name not in form:
            continue
        value = from_form(spec, form[spec.name])
        if spec.has_default and _same(value, spec.default):
            continue
        values[spec.name] = value
    return values


def config_to_form(specs: Iterable[FieldSpec], cfg: Config) -> dict[str, Any]:
    return {spec.name: to_form(spec, getattr(cfg, spec.name)) for spec in specs}


def defaults_form(specs: Iterable[FieldSpec]) -> dict[str, Any]:
    return {spec.name: to_form(spec, spec.default if spec.has_default else None) for spec in specs}
