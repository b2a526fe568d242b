"""Gradio widgets for :class:`~tunekit.webui.fields.FieldSpec` s: build them, read them, update them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import gradio as gr

from tunekit.config.secrets import is_secret

from .fields import FieldSpec, to_form
from .groups import TUTORIAL_GROUPS, WORDED_CHOICES, Group, condition_fields, visible_groups
from .guard import Guard
from .i18n import field_help, t
from .labels import choice_word, has_label, option_label, unset_word
from .sections import OPEN_SECTIONS, section_title, sections, tab_of
from .validation import Validation

VALUES_MARK = "__tk_form__"
# a field's change: its value into the page's store of its form (created from the hidden JSON's first value)
SYNC_JS = (
    "(v, init) => { const forms = (window.__tkForms ??= {}); "
    f"(forms[init.{VALUES_MARK}] ??= {{...init}})[%s] = v; }}"
)
# an event that reads a form: the hidden JSON's value replaced by the store's (see FormView.add_values)
TAKE_VALUES_JS = (
    f"(...args) => args.map(a => (a && typeof a === 'object' && a.{VALUES_MARK}) ? "
    f"{{...((window.__tkForms || {{}})[a.{VALUES_MARK}] || a)}} : a)"
)


def takes_values(inputs) -> bool:
    """Whether an event's ``inputs`` (one component or several) hold a form's hidden values (the event then needs
    :data:`TAKE_VALUES_JS`)."""
    comps = inputs if isinstance(inputs, (set, list, tuple)) else [inputs]
    return any(isinstance(c, gr.JSON) and isinstance(c.value, dict) and VALUES_MARK in c.value for c in comps)


def _named(spec: FieldSpec, text: str) -> str:
    """``text`` after the option's name, set small (code) under its label: a YAML user maps the field by it."""
    return f"`{spec.name}` · {text}" if has_label(spec.name) else text


def help_text(spec: FieldSpec, lang: str) -> str:
    """The line under an option's label: its name (when the label is words), help, note and default."""
    return _named(spec, spec.help(field_help(spec.name, spec.description, lang), lang))


def template_choices(templates: list[str] | None, lang: str) -> list[tuple[str, str]]:
    """A template picker's choices: ``(none)`` in ``lang`` (the value ``""``), then the template names."""
    return [(unset_word("choice", lang), "")] + [(n, n) for n in templates or []]


def choices_of(spec: FieldSpec, lang: str, templates: list[str] | None = None) -> list[tuple[str, str]] | None:
    """``(shown, value)`` pairs of an option offered as a choice (None: a free text field); the values are the
    option's own, the words are the board's (``(none)``, the DeepSpeed presets' names). ``templates``: the names the
    ``template`` picker offers."""
    if spec.name == "template" and spec.kind == "text":  # a name not offered stays accepted (allow_custom_value)
        return template_choices(templates, lang)
    if spec.kind in ("tristate", "choice"):
        return [(label or unset_word(spec.kind, lang), label) for label in spec.choice_labels]
    if spec.name in WORDED_CHOICES and spec.kind == "text":
        return [(choice_word(spec.name, v, lang) or v, v) for v in WORDED_CHOICES[spec.name]]
    return None


def make_widget(spec: FieldSpec, lang: str, templates: list[str] | None = None):
    value = to_form(spec, spec.default if spec.has_default else None)
    label = option_label(spec.name, lang)
    common: dict[str, Any] = dict(label=label, info=help_text(spec, lang), elem_id=f"tk-field-{spec.name}")
    if spec.kind == "bool":
        return gr.Checkbox(value=value, **common)
    choices = choices_of(spec, lang, templates)
    if choices is not None:  # a JSON file typed or loaded stays accepted where the option takes one (deepspeed)
        return gr.Dropdown(choices=choices, value=value, allow_custom_value=spec.kind == "text", **common)
    if spec.kind == "multi":
        return gr.Dropdown(choices=[], value=value, multiselect=True, allow_custom_value=True, **common)
    if is_secret(spec.name):  # typed as dots; saved, previewed and logged as its ${ENV_VAR} reference
        return gr.Textbox(value=value, type="password", **common)
    return gr.Textbox(value=value, **common)


class FormView:
    """The widgets of one tab's options, in spec order."""

    def __init__(self, specs: list[FieldSpec]):
        self.specs = list(specs)
        self.by_name = {s.name: s for s in self.specs}
        self.comps: dict[str, Any] = {}
        # (accordion, title key after "sec_", the Advanced section's options; [] for a tutorial group, see groups)
        self.accordions: list[tuple[Any, str, list[FieldSpec]]] = []
        self.groups: list[tuple[Any, Group, list[FieldSpec]]] = []  # the tutorial groups shown (webui/groups.py)
        self.advanced: Any = None  # the "Advanced" accordion when the form has basic options
        self.templates: list[str] = []  # the names the template picker offers (its choices on a language switch)
        self.values: Any = None  # the hidden JSON of every field's value (a rendered tab form: add_values)

    def render(
        self, lang: str, tab: str, templates: list[str] | None = None, per_row: int = 3, basic: tuple[str, ...] = ()
    ) -> None:
        """The tab's options in their sections. With ``basic``, those options come first, in that order, in
        their tutorial groups (:data:`tunekit.webui.groups.TUTORIAL_GROUPS`; each shown only where it applies),
        and every section of the rest goes into one closed "Advanced" accordion (:attr:`advanced`)."""
        by_name, self.templates = self.by_name, list(templates or [])
        first = [by_name[name] for name in basic if name in by_name and tab_of(by_name[name]) == tab]
        if first:
            self._groups(first, lang, templates, per_row)
            rest = [s for s in self.specs if s not in first]
            with gr.Accordion(t("advanced", lang), open=False, elem_id="tk-advanced") as self.advanced:
                self._sections(rest, lang, tab, templates, per_row)
        else:
            self._sections(self.specs, lang, tab, templates, per_row)
        # keep spec order == widget order
        self.specs = [s for s in self.specs if s.name in self.comps]
        self.add_values(tab)
        self._wire_groups(lang)

    def _groups(self, first: list[FieldSpec], lang: str, templates, per_row: int) -> None:
        """``first`` in their tutorial groups, one accordion each; options of no group before them."""
        names = {s.name for s in first}
        placed = {n for g in TUTORIAL_GROUPS for n in g.options if n in names}
        if loose := [s for s in first if s.name not in placed]:
            with gr.Group(elem_id="tk-section-basic"):
                self._rows(loose, lang, templates, per_row)
        shown = visible_groups(TUTORIAL_GROUPS, self.by_name, {})
        for group in TUTORIAL_GROUPS:
            specs = [self.by_name[n] for n in group.options if n in names]
            if not specs:
                continue
            key = f"group_{group.name}"
            with gr.Accordion(
                section_title(key, [], lang),
                open=group.open,
                visible=shown[group.name],
                elem_id=f"tk-group-{group.name}",
            ) as acc:
                self._rows(specs, lang, templates, per_row)
            self.accordions.append((acc, key, []))
            self.groups.append((acc, group, specs))

    def _wire_groups(self, lang: str) -> None:
        """Show and hide the tutorial groups when an option that decides where they apply changes (a value
        loaded from a YAML or restored on page load too). A failure answers in ``lang`` (webui/guard.py)."""
        deciding = {c for _acc, g, specs in self.groups for c in condition_fields(g, specs) if c in self.comps}
        if not deciding:
            return
        Guard(lang=lang).on(
            [self.comps[name].change for name in sorted(deciding)],
            self.on_group_switch,
            inputs={self.values},
            outputs=[acc for acc, _g, _specs in self.groups],
            js=TAKE_VALUES_JS,
            show_progress="hidden",
            api_visibility="private",
        )

    def group_visibility(self, form: Mapping[str, Any]) -> dict[str, bool]:
        """Group name → shown, for the form values ``form`` (option → widget value)."""
        return visible_groups([g for _acc, g, _specs in self.groups], self.by_name, form)

    def on_group_switch(self, data: Mapping[Any, Any]) -> dict[Any, Any]:
        """The handler: ``{group accordion: visible update}`` from the widgets' values."""
        shown = self.group_visibility(self.read_map(data))
        return {acc: gr.update(visible=shown[g.name]) for acc, g, _specs in self.groups}

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

    def render_flat(self, lang: str, per_row: int = 3, key: str | None = None) -> None:
        """The options in rows, no sections; with ``key`` (unique on the page), read through :attr:`values`."""
        for i in range(0, len(self.specs), per_row):
            with gr.Row():
                for spec in self.specs[i : i + per_row]:
                    self.comps[spec.name] = make_widget(spec, lang)
        if key is not None:
            self.add_values(key)

    def add_values(self, tab: str) -> None:
        """One hidden JSON that stands for every field's value in the handlers' inputs, filled in the page at
        each event from a store that one browser-side event per field keeps current (:data:`TAKE_VALUES_JS`);
        ``tab``: the form's key in that store, one per form of the page.

        Why: Gradio 6.31's page records each input of an event it has completed in its table of loading statuses
        (a completed event is given ``stream_state: "closed"``), and every later status update of any event (the
        job timers' ticks too) searches the component tree once per entry. With the ~230 widgets as inputs, the
        first edit left ~245 entries and the page used a whole core while a run trained. The store is written
        before any handler of the same edit reads it (Gradio runs one trigger's events in order), and the
        values are read back through each widget's own ``preprocess`` (:meth:`read_map`), as Gradio would."""
        initial = {s.name: self.comps[s.name].value for s in self.specs}
        self.values = gr.JSON(value={VALUES_MARK: tab, **initial}, visible=False)
        for spec in self.specs:
            self.comps[spec.name].change(
                None, inputs=[self.comps[spec.name], self.values], js=SYNC_JS % json.dumps(spec.name)
            )

    def start_with(self, values: Mapping[str, Any]) -> None:
        """The values a new page shows (its widgets' initial values, and so those of :attr:`values`)."""
        for name, value in values.items():
            self.comps[name].value = value
            if self.values is not None:
                self.values.value[name] = value

    @property
    def inputs(self) -> list[Any]:
        """The widgets (what handlers update); handlers read the values from :attr:`values`."""
        return [self.comps[s.name] for s in self.specs]

    def __getitem__(self, name: str):
        return self.comps[name]

    def read(self, args) -> dict[str, Any]:
        return {s.name: v for s, v in zip(self.specs, args)}

    def read_map(self, data: Mapping[Any, Any]) -> dict[str, Any]:
        """Form values from a handler's ``{component: value}`` inputs (Gradio's set inputs): a widget given as an
        input itself, else its value in :attr:`values`."""
        held = data.get(self.values) or {}
        return {
            name: data[comp] if comp in data else comp.preprocess(held[name])
            for name, comp in self.comps.items()
            if comp in data or name in held
        }

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
        """One update per widget: new values, validation messages next to the field, or help text (with
        ``labels``: the label, help and choices' words in ``lang``, for a language switch).

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
                errors = check.field_text(spec.name, lang or "en")  # said in the page's language
                if errors:
                    props["info"] = _named(spec, "⚠ " + " ".join(errors))
                    props["elem_classes"] = ["tk-invalid"]
                else:
                    props["info"] = help_text(spec, lang or "en")
                    props["elem_classes"] = []
            elif labels:
                props["info"] = help_text(spec, lang or "en")
            if labels:
                props.update(_words(spec, lang or "en", self.templates))
            out.append(gr.update(**props) if props else gr.skip())
        return out


def _words(spec: FieldSpec, lang: str, templates: list[str]) -> dict[str, Any]:
    """The label and the choices' words of one widget in ``lang`` (its values unchanged)."""
    props: dict[str, Any] = {"label": option_label(spec.name, lang)}
    choices = choices_of(spec, lang, templates)
    if choices is not None:
        props["choices"] = choices
    return props
