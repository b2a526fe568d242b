"""Gradio widgets for :class:`~tunekit.webui.fields.FieldSpec` s: build them, read them, update them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gradio as gr

from tunekit.config.secrets import is_secret

from .fields import FieldSpec, to_form
from .i18n import field_help, t
from .sections import OPEN_SECTIONS, section_title, sections, tab_of
from .validation import Validation

UNSET_LABEL = {"tristate": "(auto)", "choice": "(none)"}


def help_text(spec: FieldSpec, lang: str) -> str:
    return spec.help(field_help(spec.name, spec.description, lang), lang)


def make_widget(spec: FieldSpec, lang: str, templates: list[str] | None = None):
    value = to_form(spec, spec.default if spec.has_default else None)
    common: dict[str, Any] = dict(label=spec.name, info=help_text(spec, lang), elem_id=f"tk-field-{spec.name}")
    if spec.kind == "bool":
        return gr.Checkbox(value=value, **common)
    if spec.kind in ("tristate", "choice"):
        choices = [(label or UNSET_LABEL[spec.kind], label) for label in spec.choice_labels]
        return gr.Dropdown(choices=choices, value=value, **common)
    if spec.kind == "multi":
        return gr.Dropdown(choices=[], value=value, multiselect=True, allow_custom_value=True, **common)
    if spec.name == "template" and spec.kind == "text":
        return gr.Dropdown(
            choices=[("(none)", "")] + [(n, n) for n in templates or []],
            value=value,
            allow_custom_value=True,
            **common,
        )
    if is_secret(spec.name):  # typed as dots; saved, previewed and logged as its ${ENV_VAR} reference
        return gr.Textbox(value=value, type="password", **common)
    return gr.Textbox(value=value, **common)


class FormView:
    """The widgets of one tab's options, in spec order."""

    def __init__(self, specs: list[FieldSpec]):
        self.specs = list(specs)
        self.comps: dict[str, Any] = {}
        self.accordions: list[tuple[Any, str, list[FieldSpec]]] = []
        self.advanced: Any = None  # the "Advanced" accordion when the form has basic options

    def render(
        self, lang: str, tab: str, templates: list[str] | None = None, per_row: int = 3, basic: tuple[str, ...] = ()
    ) -> None:
        """The tab's options in their sections. With ``basic``, those options come first, in that order,
        and every section of the rest goes into one closed "Advanced" accordion (:attr:`advanced`)."""
        by_name = {s.name: s for s in self.specs}
        first = [by_name[name] for name in basic if name in by_name and tab_of(by_name[name]) == tab]
        if first:
            with gr.Group(elem_id="tk-section-basic"):
                self._rows(first, lang, templates, per_row)
            rest = [s for s in self.specs if s not in first]
            with gr.Accordion(t("advanced", lang), open=False, elem_id="tk-advanced") as self.advanced:
                self._sections(rest, lang, tab, templates, per_row)
        else:
            self._sections(self.specs, lang, tab, templates, per_row)
        # keep spec order == widget order
        self.specs = [s for s in self.specs if s.name in self.comps]

    def _sections(self, specs: list[FieldSpec], lang: str, tab: str, templates, per_row: int) -> None:
        for name, group in sections(specs, tab).items():
            with gr.Accordion(
                section_title(name, group, lang), open=name in OPEN_SECTIONS, elem_id=f"tk-section-{name}"
            ) as acc:
                self._rows(group, lang, templates, per_row)
            self.accordions.append((acc, name, group))

    def _rows(self, specs: list[FieldSpec], lang: str, templates, per_row: int) -> None:
        for i in range(0, len(specs), per_row):
            with gr.Row():
                for spec in specs[i : i + per_row]:
                    self.comps[spec.name] = make_widget(spec, lang, templates)

    def render_flat(self, lang: str, per_row: int = 3) -> None:
        for i in range(0, len(self.specs), per_row):
            with gr.Row():
                for spec in self.specs[i : i + per_row]:
                    self.comps[spec.name] = make_widget(spec, lang)

    @property
    def inputs(self) -> list[Any]:
        return [self.comps[s.name] for s in self.specs]

    def __getitem__(self, name: str):
        return self.comps[name]

    def read(self, args) -> dict[str, Any]:
        return {s.name: v for s, v in zip(self.specs, args)}

    def read_map(self, data: Mapping[Any, Any]) -> dict[str, Any]:
        """Form values from a handler's ``{component: value}`` inputs (Gradio's set inputs)."""
        return {name: data[comp] for name, comp in self.comps.items() if comp in data}

    def update_map(self, **kwargs) -> dict[Any, Any]:
        """:meth:`updates` as ``{component: update}`` for a handler that answers with a dict."""
        return dict(zip(self.inputs, self.updates(**kwargs)))

    def updates(
        self,
        values: Mapping[str, Any] | None = None,
        check: Validation | None = None,
        lang: str | None = None,
        labels: bool = False,
        flagged: set[str] | None = None,
    ) -> list[Any]:
        """One update per widget: new values, validation messages next to the field, or help text.

        With ``flagged`` (the fields shown as invalid so far), only fields whose state changes are
        touched: re-rendering every widget on each keystroke is what makes a big form feel slow.
        """
        out = []
        now = set(check.by_field) if check is not None else set()
        for spec in self.specs:
            props: dict[str, Any] = {}
            if values is not None and spec.name in values:
                props["value"] = values[spec.name]
            touch = flagged is None or spec.name in now or spec.name in flagged
            if check is not None and touch:
                errors = check.by_field.get(spec.name)
                if errors:
                    props["info"] = "⚠ " + " ".join(errors)
                    props["elem_classes"] = ["tk-invalid"]
                else:
                    props["info"] = help_text(spec, lang or "en")
                    props["elem_classes"] = []
            elif labels:
                props["info"] = help_text(spec, lang or "en")
            out.append(gr.update(**props) if props else gr.skip())
        return out
