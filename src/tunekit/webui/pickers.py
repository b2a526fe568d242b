"""The Train tab's model and data pickers and its Start gate, without widgets (the tab wires them).

- **Datasets**: each entry of ``dataset_dir/dataset_info.json`` (read by tunekit's own reader) that the board may read
  (:meth:`~tunekit.webui.paths.PathPolicy.dataset_problem`), that fits the stage (ranking data for the pairwise stages
  rm and dpo, kto-tagged data for kto, other data for the rest; a text corpus, an alpaca entry that maps only its
  ``prompt`` column, for pt only) and whose media the model takes (images, videos or audios only for a vision / audio
  model whose family trains on them). Each is shown with its row count (local files only: "?" for a hub dataset) and
  its format.
- **Template**: a local model folder's family suggests its template (:func:`~tunekit.webui.backend.model_family`);
  a folder of no family tunekit knows that ships its own chat template gets ``jinja``.
- **Start** is allowed only for a valid config with a model and a dataset that fits; otherwise the reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunekit.config.lists import split_list
from tunekit.config.stages import STAGES
from tunekit.data import mm_plugins
from tunekit.data.dataset_info import DatasetAttr, confined_to, parse_entry, read_dataset_info
from tunekit.data.media_columns import MEDIA_COLUMNS
from tunekit.data.templates.registry import BY_NAME
from tunekit.errors import TunekitError

from . import backend
from .i18n import t
from .paths import PathPolicy, PathRefused, safe_message
from .validation import Validation


def say(key: str, lang: str, **fields: Any) -> str:
    """A picker's line in the page's language (``i18n.TEXT``'s ``pick_`` entries), its fields filled in."""
    return t(f"pick_{key}", lang).format(**fields)


# ---------------------------------------------------------------- datasets
@dataclass(frozen=True)
class DatasetChoice:
    name: str
    kinds: tuple[str, ...]  # format first (alpaca, sharegpt, openai, text), then ranking / kto / media columns
    rows: int | None = None  # None: a hub dataset, or not counted

    def label(self, lang: str = "en") -> str:
        rows = "?" if self.rows is None else f"{self.rows:,}"
        return f"{self.name} · {rows} {say('rows', lang)} · {', '.join(self.kinds)}"


def kinds_of(entry: dict[str, Any], attr: DatasetAttr) -> tuple[str, ...]:
    """What a dataset_info.json entry holds: its format (``text`` for an alpaca entry that maps only ``prompt``, a text
    corpus), ``ranking``, ``kto`` and the media columns it maps."""
    given = set(entry.get("columns") or {})
    fmt = attr.formatting
    if fmt == "alpaca" and given and given <= {"prompt", "system"} and "prompt" in given:
        fmt = "text"
    kinds = [fmt] + (["ranking"] if attr.ranking else []) + (["kto"] if attr.column("kto_tag") else [])
    return (*kinds, *(k for k in MEDIA_COLUMNS if attr.column(k)))


NEEDS = {"pairwise": "need_pairwise", "kto": "need_kto", "pt": "need_pt"}  # stage processor -> what it trains on


def stage_need(kinds: Iterable[str], stage: str) -> str | None:
    """The word key of what ``stage`` trains on when data of ``kinds`` is not that; None when it fits."""
    kinds = set(kinds)
    processor = STAGES[stage].processor if stage in STAGES else stage
    if processor == "pairwise":
        fits = "ranking" in kinds
    elif "ranking" in kinds:
        fits = False
    elif processor == "kto":
        fits = "kto" in kinds
    elif processor == "pt":
        fits = "kto" not in kinds
    else:
        fits = not kinds & {"kto", "text"}
    return None if fits else NEEDS.get(processor, "need_plain")


@dataclass
class Listing:
    offered: list[DatasetChoice]
    #: name -> why it is not offered: (word key, fields) for :func:`say`
    left_out: dict[str, tuple[str, dict[str, str]]]

    def choices(self, lang: str = "en") -> list[tuple[str, str]]:
        return [(c.label(lang), c.name) for c in self.offered]


def list_datasets(
    policy: PathPolicy,
    dataset_dir: str | None,
    stage: str | None,
    media: Iterable[str] = (),
    names: Iterable[str] | None = None,
    count: bool = True,
) -> Listing:
    """The datasets of ``dataset_dir`` the board offers for ``stage`` and a model taking ``media``: local ones first,
    each in the file's order. ``names``: only these entries (the Start gate); ``count``: count rows."""
    listing = Listing([], {})
    try:
        folder = policy.check(dataset_dir or "data", "Option 'dataset_dir'")
        info = read_dataset_info(folder)
    except (TunekitError, OSError):  # refused or unreadable: the field's own message says why
        return listing
    wanted = set(names) if names is not None else None
    hub: list[DatasetChoice] = []
    for name, entry in info.items():
        if (wanted is not None and name not in wanted) or policy.dataset_problem("dataset", name, str(folder)):
            continue
        try:
            attr = parse_entry(name, entry, folder)
        except TunekitError as exc:
            listing.left_out[name] = ("broken", {"name": name, "error": safe_message(str(exc), 1)})
            continue
        kinds = kinds_of(entry, attr)
        need = stage_need(kinds, stage or "sft")
        extra = [k for k in kinds if k in MEDIA_COLUMNS and k not in media]
        if need:
            listing.left_out[name] = ("unfit", {"name": name, "kinds": ", ".join(kinds), "stage": stage, "need": need})
            continue
        if extra:
            listing.left_out[name] = ("no_media", {"name": name, "media": ", ".join(extra)})
            continue
        with confined_to(policy.roots):
            rows = backend.count_rows(attr) if count else None
        (listing.offered if attr.load_from == "file" else hub).append(DatasetChoice(name, kinds, rows))
    listing.offered += hub
    return listing


def unique(values: Any) -> list[str]:
    """The picked names in order, each once (the multiselect de-duplicates what it is given)."""
    parts = split_list(values) if isinstance(values, str) else [str(v).strip() for v in values or ()]
    return list(dict.fromkeys(p for p in parts if p))


# ---------------------------------------------------------------- model
def local_model(policy: PathPolicy, model: str | None) -> Path | None:
    """The allowed local folder ``model`` names, or None (a hub id, a refused or missing path)."""
    if not model:
        return None
    try:
        folder = policy.check(model, "Option 'model_name_or_path'")
    except PathRefused:
        return None
    return folder if folder.is_dir() else None


@dataclass(frozen=True)
class TemplateHint:
    template: str | None = None  # the suggestion: the family's template, or "jinja" for the folder's own
    family: str | None = None

    def line(self, current: str | None, lang: str = "en") -> str:
        """The one line beside the model field: what was chosen and why, or what the folder suggests."""
        if not self.template:
            return ""
        if self.family is None:
            return say("own", lang) if current in ("", None, "jinja") else ""
        key = "chosen" if current in ("", None, self.template) else "kept"
        return say(key, lang, template=self.template, family=self.family, current=current)


def template_hint(policy: PathPolicy, model: str | None) -> TemplateHint:
    folder = local_model(policy, model)
    if folder is None:
        return TemplateHint()
    template, family = backend.model_family(str(folder))
    if template in mm_plugins.FAMILIES:  # a media family: its plugin checked the folder's chat format (fits)
        return TemplateHint(template, family)
    if template in BY_NAME and BY_NAME[template].reasoning:  # its official template drops earlier thoughts: 'jinja'
        return TemplateHint(template, family)  # cannot find the spans of a multi-turn conversation (jinja_mode.py)
    if backend.model_has_chat_template(str(folder)):  # the folder's own template is the exact official format
        return TemplateHint("jinja")
    # a text model_type spans several chat formats (a llama folder may be Llama 2 or 3, a qwen2 one a distilled
    # DeepSeek-R1): the family's usual template, said as a suggestion
    return TemplateHint(template, family) if template else TemplateHint()


def model_media(policy: PathPolicy, model: str | None, template: str | None) -> tuple[str, ...]:
    """The media the model trains on: its multimodal template's family's, else its local folder's family's."""
    media = backend.media_of_template(template)
    if media or not model:
        return media
    folder = local_model(policy, model)
    return backend.media_of_template(backend.model_family(str(folder))[0]) if folder else ()


# ---------------------------------------------------------------- Start
def start_reason(policy: PathPolicy, check: Validation, lang: str = "en") -> str:
    """Why Start is off for this check of the form, in words ("" when it may start)."""
    if not check.ok:
        first = next((line.strip() for line in check.text(lang).splitlines() if line.strip()), "")
        reason = say("fix_options", lang, first=first[:160])
    elif not check.config.model_name_or_path:
        reason = say("no_model", lang)
    elif not check.config.dataset_names:
        reason = say("no_dataset", lang)
    else:
        cfg = check.config
        media = model_media(policy, cfg.model_name_or_path, cfg.template)
        listing = list_datasets(policy, cfg.dataset_dir, cfg.stage, media, cfg.dataset_names, count=False)
        found = [listing.left_out[n] for n in cfg.dataset_names if n in listing.left_out]
        if not found:
            return ""
        key, fields = found[0]
        reason = say(key, lang, **{**fields, "need": say(fields["need"], lang)} if key == "unfit" else fields)
    return say("start_off", lang, reason=reason)
