"""The memory-plan panel beside the Train form: tunekit's plan (``tunekit plan --json``) as short Markdown, in the
board's language.

Numbers, option names, values and paths stay as the planner wrote them; every word is the board's
(:data:`tunekit.webui.i18n.TEXT`, the ``plan_*`` keys). The planner's notes come with their keys and values
(``structured_notes``, made by :class:`tunekit.plan.notes.Note`): in English each is the planner's own sentence, in
another language it is said again from its key and values with the ``plan_<key>`` template of that language
(``tests/webui/test_plan_panel_notes.py`` holds every key the planner has to a Chinese template).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunekit.plan.notes import render

from .i18n import TEXT, t
from .monitor import format_seconds

# Words of the plan's set-up line (method · engine · precision), longest first: the rest are names (DDP, ZeRO-3).
SETUP_WORDS = (
    ("optimizer offload", "plan_setup_optimizer_offload"),
    ("param offload", "plan_setup_param_offload"),
    ("single GPU", "plan_setup_single_gpu"),
    ("offload", "plan_setup_offload"),
    ("autocast", "plan_setup_autocast"),
)


def _replace_words(text: str, words: tuple[tuple[str, str], ...], lang: str) -> str:
    for english, key in words:
        text = text.replace(english, t(key, lang))
    return text


def note_lines(plan: Mapping[str, Any], lang: str) -> list[str]:
    """The plan's notes in ``lang``: the planner's sentences in English, else each said from its key and values."""
    notes = list(plan.get("notes") or [])
    structured = plan.get("structured_notes")
    if lang == "en" or structured is None:  # a plan without keys (not the planner's): its sentences as written
        return [str(note) for note in notes]
    return [
        render(note, lambda key: t(f"plan_{key}", lang), lambda name: t(f"plan_join_{name}", lang))
        for note in structured
    ]


def setup_text(setup: Mapping[str, Any], lang: str) -> str:
    text = " · ".join(str(setup[k]) for k in ("method", "engine", "precision") if setup.get(k))
    return text if lang == "en" else _replace_words(text, SETUP_WORDS, lang)


def _component(name: str, lang: str) -> str:
    """A memory component's words (a component the board has no words for: its name)."""
    return t(f"plan_comp_{name}", lang) if f"plan_comp_{name}" in TEXT else name


def format_plan(plan: Mapping[str, Any], lang: str = "en") -> str:
    """The planner's JSON as a short Markdown panel (fits or not, memory by component, steps, notes)."""
    lines = _head(plan, lang)
    mem = plan.get("memory") or {}
    components = mem.get("components") or {
        k: v for k, v in mem.items() if k != "total_gib" and isinstance(v, (int, float))
    }
    if components:
        lines += ["", f"| {t('plan_component', lang)} | GiB |", "|---|---:|"]
        shown = {k: v for k, v in components.items() if isinstance(v, (int, float)) and v >= 0.005}
        lines += [f"| {_component(k, lang)} | {v:.2f} |" for k, v in shown.items()]
        if len(shown) < len(components):
            lines.append(f"| {t('plan_more_below', lang).format(n=len(components) - len(shown))} | |")
    steps = [
        f"{t(f'plan_{k}', lang)}: {plan[k]}" for k in ("total_steps", "steps_per_epoch") if plan.get(k) is not None
    ]
    seconds = (plan.get("time") or {}).get("seconds") if isinstance(plan.get("time"), dict) else None
    if isinstance(seconds, (int, float)):
        steps.append(t("plan_time", lang).format(time=format_seconds(seconds)))
    if steps:
        lines += ["", " · ".join(steps)]
    if setup := plan.get("setup") or {}:
        lines.append(setup_text(setup, lang))
    params = plan.get("params") or {}
    if params.get("total"):
        trainable, total = f"{params.get('trainable', 0):,}", f"{params['total']:,}"
        lines.append(t("plan_trainable", lang).format(trainable=trainable, total=total))
    if plan.get("overrides"):
        shown_overrides = ", ".join(f"`{k}={v}`" for k, v in plan["overrides"].items())
        lines += ["", f"{t('plan_autofit', lang)} {shown_overrides}"]
    lines += [f"- {note}" for note in note_lines(plan, lang)]
    return "\n".join(lines) or "```json\n" + str(dict(plan)) + "\n```"


def _head(plan: Mapping[str, Any], lang: str) -> list[str]:
    """``### ✓ fits — 3.20 GiB / 80 GiB``: the verdict when the plan has a GPU to fit into."""
    fits = plan.get("fits")
    if fits is None:
        return []
    mem = plan.get("memory") or {}
    total, gpu = mem.get("total_gib"), plan.get("gpu")
    gpu_mem = plan.get("gpu_memory_gib") or (gpu.get("memory_gib") if isinstance(gpu, dict) else None)
    head = f"### {t('plan_fits' if fits else 'plan_does_not_fit', lang)}"
    if total is not None:
        head += f" — {total:.2f} GiB" + (f" / {gpu_mem:.0f} GiB" if isinstance(gpu_mem, (int, float)) else "")
    return [head]
