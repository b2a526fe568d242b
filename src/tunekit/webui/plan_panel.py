"""The memory-plan panel beside the Train form: tunekit's plan (``tunekit plan --json``) as short Markdown, in the
board's language.

Numbers, option names, values and paths stay as the planner wrote them; every word is the board's
(:data:`tunekit.webui.i18n.TEXT`, the ``plan_*`` keys). The planner's notes are English sentences: in another language
each one is matched against :data:`NOTES` (its numbers and names picked out) and said again with the words of its
``TEXT`` entry; the parts of a note that vary in words (a device, a reason, where a length comes from) are matched the
same way (:data:`PARTS`). A note no pattern matches is shown as the planner wrote it, after a marker that says so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .i18n import TEXT, t
from .monitor import format_seconds

_N = r"[\d.,]+"  # a number as the planner prints it (1,234 / 0.25 / 80)


def _table(*rows: tuple[str, str]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((key, re.compile(pattern)) for key, pattern in rows)


# The planner's notes (src/tunekit/plan): TEXT key → the English sentence, its variable parts as named groups.
NOTES = _table(
    ("plan_note_no_data", r"Data not measured \((?P<why>.*)\); pass --num-samples N to plan the steps\."),
    ("plan_note_ckpt", r"gradient checkpointing: (?P<state>.+?) \(auto: (?P<reasons>.*)\)"),
    (
        "plan_note_ckpt_planned_on",
        r"gradient_checkpointing auto: planned on; tunekit train turns it off when the run fits the device without "
        r"it \(give --gpu to see that decision\)\.",
    ),
    (
        "plan_note_cpu_heap",
        rf"on the CPU: fragmentation is (?P<gib>{_N}) GiB, twice the heap guard's slack \(freed tensors glibc keeps "
        r"resident; host/heap\.py trims them, docs/memory-model\.md section 3\.8\)\.",
    ),
    (
        "plan_note_cpu_share",
        r"on the CPU: fragmentation is (?P<share>\d+%) of the token-dependent memory \(freed tensors stay in "
        r"glibc's heap: resident memory, measured, docs/memory-model\.md section 3\.7\)\.",
    ),
    (
        "plan_note_rounding",
        rf"Older transformers rounded steps per epoch down \(the published tutorial's (?P<steps>{_N}) steps for "
        rf"(?P<samples>{_N}) samples\); transformers 5 also steps on the last partial accumulation window, which is "
        rf"what tunekit train does\. Floor rounding would give (?P<floor>{_N}) per epoch\.",
    ),
    ("plan_note_eval_separate", r"eval_dataset is separate: its size is not counted in train_samples\."),
    (
        "plan_note_packing",
        rf"packing: (?P<samples>{_N}) samples make about (?P<seqs>{_N}) sequences of (?P<tokens>{_N}) tokens\.",
    ),
    (
        "plan_note_nothing_fits",
        rf"Nothing fits on (?P<gpu>.+?): the smallest set-up \((?P<rung>.+)\) needs (?P<missing>{_N}) GiB more "
        rf"than the (?P<gib>{_N}) GiB x (?P<share>{_N}) usable(?: or (?P<gpus>\d+) GPUs with ZeRO-3)?\.",
    ),
    (
        "plan_note_budget_unmeasured",
        r"max_tokens_per_batch: data not measured, so steps are planned as per_device_train_batch_size batches; "
        r"measure the data \(dataset on disk\) to plan the token-budget batches\.",
    ),
    (
        "plan_note_budget",
        rf"max_tokens_per_batch (?P<budget>{_N}): (?P<rows>{_N}) training rows make (?P<batches>{_N}) micro-batches "
        r"per epoch \(samples per optimizer step vary; per_device_train_batch_size is not used\)\.",
    ),
    (
        "plan_note_budget_oversized",
        rf"max_tokens_per_batch: (?P<n>{_N}) sample\(s\) alone exceed it once padded to a multiple of "
        rf"(?P<multiple>{_N}); each is its own micro-batch\.",
    ),
    (
        "plan_note_moe",
        r"(?P<model>.+) is a mixture-of-experts model: expert routing is not modelled, activations are a rough "
        r"estimate\.",
    ),
    (
        "plan_note_ref_model",
        r"stage (?P<stage>\w+): a frozen reference model is held \(counted in base_weights at this model's size; "
        r"with LoRA the policy without its adapter serves instead, no copy; precompute_ref_log_probs frees it "
        r"before training\)\.",
    ),
    (
        "plan_note_pairs",
        rf"stage (?P<stage>\w+): chosen and rejected run together: the activations are those of (?P<seqs>{_N}) "
        rf"sequences per micro-batch of (?P<batch>{_N})\.",
    ),
    (
        "plan_note_tower",
        r"(?P<family>\S+): the activations of its (?P<tower>audio|vision) tower are not modelled \(its weights and "
        r"trainable parameters are; its media tokens are part of the sequence(?:, (?P<fixed>\d+) per image without "
        r"measured data)?\)\.",
    ),
    (
        "plan_note_media_cut",
        rf"media: (?P<tokens>{_N}) media tokens per sample alone exceed cutoff_len (?P<cutoff>{_N}): tunekit train "
        r"drops such samples \(an image is never cut\) and names them; raise cutoff_len or lower image_max_pixels\.",
    ),
)

# The parts of a note that vary in words; a group of NOTES or PARTS named like a key here is said again by its rows.
PARTS: dict[str, tuple[tuple[str, re.Pattern[str]], ...]] = {
    "why": _table(("plan_why_no_dataset", r"no dataset configured")),
    "tower": _table(("plan_tower_audio", r"audio"), ("plan_tower_vision", r"vision")),
    "state": _table(
        ("plan_ckpt_on", r"on"),
        ("plan_ckpt_off", r"off"),
        ("plan_ckpt_lowest", r"on for the lowest (?P<k>\d+) of (?P<n>\d+) layers"),
    ),
    "reason": _table(
        (
            "plan_reason_within",
            rf"without it this run needs (?P<need>{_N}) GiB per device, within (?P<have>{_N}) GiB \((?P<device>.+)\)",
        ),
        ("plan_reason_force", r"set gradient_checkpointing: true to force it"),
        (
            "plan_reason_over",
            rf"without it this run would need (?P<need>{_N}) GiB per device, over (?P<have>{_N}) GiB "
            r"\((?P<device>.+)\)",
        ),
        ("plan_reason_lowest", rf"with the lowest (?P<k>\d+) layers checkpointed it needs (?P<gib>{_N}) GiB"),
        (
            "plan_reason_standard",
            rf"without it this run needs (?P<need>{_N}) GiB, over the (?P<target>{_N}) GiB of the standard recipe "
            r"\(every layer checkpointed, whole logits\)",
        ),
        (
            "plan_reason_standard_lowest",
            rf"the lowest (?P<k>\d+) layers checkpointed bring it to (?P<gib>{_N}) GiB for about (?P<share>\d+%) of "
            r"the step time",
        ),
        ("plan_reason_rows", rf"planned at (?P<tokens>{_N}) tokens per row, from (?P<source>.+)"),
        ("plan_reason_budget", rf"planned at max_tokens_per_batch (?P<budget>{_N})"),
    ),
    "device": _table(
        ("plan_device_gpu", rf"(?P<share>\d+%) of the (?P<gpu>.+)'s (?P<gib>{_N}) GiB"),
        ("plan_device_ram", rf"(?P<share>\d+%) of (?P<gib>{_N}) GiB RAM(?: / (?P<procs>\d+) processes)?"),
    ),
    "source": _table(
        ("plan_source_generation", r"(?P<source>.+) \+ generation_max_new_tokens"),
        ("plan_source_cutoff", r"cutoff_len"),
        ("plan_source_padded", r"measured \(longest row, padded\)"),
        ("plan_source_padding_free", r"measured \(longest row, padding-free rows\)"),
    ),
}

# Words of the plan's set-up line (method · engine · precision), longest first: the rest are names (DDP, ZeRO-3).
SETUP_WORDS = (
    ("optimizer offload", "plan_setup_optimizer_offload"),
    ("param offload", "plan_setup_param_offload"),
    ("single GPU", "plan_setup_single_gpu"),
    ("offload", "plan_setup_offload"),
    ("autocast", "plan_setup_autocast"),
)
# Words of an Auto-fit rung (plan/fit.py), longest first: "DeepSpeed z3 + gradient checkpointing + Liger".
RUNG_WORDS = (
    ("no gradient checkpointing", "plan_rung_no_ckpt"),
    ("gradient checkpointing", "plan_rung_ckpt"),
    ("Liger fused loss", "plan_rung_liger_loss"),
)


def _replace_words(text: str, words: tuple[tuple[str, str], ...], lang: str) -> str:
    for english, key in words:
        text = text.replace(english, t(key, lang))
    return text


def reword(text: str, rows, lang: str) -> str | None:
    """``text`` (one English sentence of the planner) in ``lang`` by the first of ``rows`` it matches; None when
    none does."""
    for key, pattern in rows:
        found = pattern.fullmatch(text.strip())
        if found is None:
            continue
        parts = {name: _part(name, value, lang) for name, value in found.groupdict().items()}
        return t(key, lang).format(**parts)
    return None


def _part(name: str, value: str | None, lang: str) -> str:
    if value is None:
        return ""
    if name == "reasons":  # "reason; reason; planned at ...": each said again, joined the language's way
        return t("plan_reason_join", lang).join(_part("reason", r, lang) for r in value.split("; "))
    if name in ("gpus", "procs", "fixed"):  # an optional tail: its words only when the planner wrote it
        return t(f"plan_tail_{name}", lang).format(n=value)
    if name == "rung":
        return _replace_words(value, RUNG_WORDS, lang)
    rows = PARTS.get(name)
    return (reword(value, rows, lang) or value) if rows else value


def note_text(note: str, lang: str) -> str:
    """One planner note in ``lang`` (English: as written)."""
    if lang == "en":
        return note
    said = reword(note, NOTES, lang)
    return said if said is not None else f"{t('plan_note_as_written', lang)} {note}"


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
    lines += [f"- {note_text(note, lang)}" for note in plan.get("notes") or plan.get("warnings") or []]
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
