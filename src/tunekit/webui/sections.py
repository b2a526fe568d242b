"""Where each option shows up on the board: which tab, which accordion.

An option lands in its schema group's accordion on the Train tab, so a new option or a new group needs
no board code. An option declared with its own section (``option(section=...)`` in ``config/options/``: LoRA
and freeze out of "stage and method"; quantization and acceleration out of "model") lands in that section's
accordion; the generation and export groups go to the Chat and Export tabs. On the Train tab the options of the
tutorial's groups (:mod:`tunekit.webui.groups`) come first, in those groups; the sections here hold the rest, under
"Advanced".
"""

from __future__ import annotations

from collections import OrderedDict

from .fields import FieldSpec
from .groups import grouped_names
from .i18n import TEXT, t

# Sections in display order; groups not listed follow in schema order.
SECTION_ORDER = (
    "model",
    "data",
    "method",
    "lora",
    "freeze",
    "training",
    "rlhf",
    "quantization",
    "acceleration",
    "distributed",
    "logging",
)
OPEN_SECTIONS = ("model", "data", "method", "training")

# The Train tab's basic mode: the tutorial's parameter groups (LLaMA Board's, webui/groups.py), in display order.
# Every other option is under the closed "Advanced" accordion (in its section).
BASIC_FIELDS = grouped_names()

# Groups shown on other tabs instead of Train.
TAB_OF_GROUP = {"infer": "chat", "export": "export"}


def section_of(spec: FieldSpec) -> str:
    return spec.section  # the field's own section (config/options/facts.py), else its group


def tab_of(spec: FieldSpec) -> str:
    return TAB_OF_GROUP.get(spec.group, "train")


def sections(specs: list[FieldSpec], tab: str = "train") -> OrderedDict[str, list[FieldSpec]]:
    """Section name → its options, in display order, for one tab."""
    found: dict[str, list[FieldSpec]] = {}
    for spec in specs:
        if tab_of(spec) == tab:
            found.setdefault(section_of(spec), []).append(spec)
    ordered: OrderedDict[str, list[FieldSpec]] = OrderedDict()
    for name in SECTION_ORDER:
        if name in found:
            ordered[name] = found.pop(name)
    ordered.update(found)
    return ordered


def section_title(name: str, specs: list[FieldSpec], lang: str) -> str:
    if f"sec_{name}" in TEXT:
        return t(f"sec_{name}", lang)
    return specs[0].group_title if specs else name
