"""``tokenized_path``: the tokenized datasets saved with what they depend on, reused only for the same config.

LLaMA-Factory reloads a ``tokenized_path`` whatever the config says now. tunekit writes into
``tunekit_tokenized.json`` everything the saved rows depend on (stage, template, tokenizer, cutoff_len,
masking, packing, the media plugin and its settings, the datasets and the split) and refuses a folder
made for something else, naming the key, both values and the fix. Multimodal rows hold absolute media paths
that the collator reads again at every step, so each file's size and modification time are saved too
(``tunekit_media.json``) and a missing or changed file is an error on load, not a wrong batch later.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from ..config.problems import Said
from ..config.schema import Config
from ..errors import DataError
from .cache import PROCESSOR_VERSION, media_options, tokenization_options, tokenizer_signature
from .media_columns import MEDIA_COLUMNS, PROCESSOR_FILES

META = "tunekit_tokenized.json"
MEDIA = "tunekit_media.json"
FORMAT = 2  # 1: reports only (tunekit before the checks); 2: the "depends" keys and the media listing


def _sha(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()[:16]


def _processor_signature(model: str | None) -> str | None:
    """The model's media processor configs (patch and merge sizes decide the token counts), hashed."""
    folder = Path(model or "")
    if not model or not folder.is_dir():
        return model  # a hub id: its name is all there is to compare without downloading
    parts = [f"{n}:{(folder / n).read_text(encoding='utf-8')}" for n in PROCESSOR_FILES if (folder / n).is_file()]
    return _sha("\n".join(parts))


def depends_on(cfg: Config, tokenizer, template, mm, stage: str) -> dict[str, Any]:
    """What the tokenized rows of ``cfg`` depend on; ``template``/``mm`` as :func:`pipeline.prepare_datasets` builds
    them."""
    jinja = template.chat_template_jinja() if hasattr(template, "chat_template_jinja") else None
    split_seed = (cfg.val_size > 0 and not cfg.eval_dataset_names) or cfg.mix_strategy != "concat"
    return {
        "processor_version": PROCESSOR_VERSION,
        "stage": stage,
        "template": cfg.template,
        "template_rendering": _sha(jinja),
        "vocab_size": len(tokenizer),
        "tokenizer": tokenizer_signature(tokenizer)[:16],
        **tokenization_options(cfg),
        "media_plugin": getattr(mm, "NAME", None),
        "media_options": media_options(cfg) if mm is not None else None,
        "media_processor": _processor_signature(cfg.model_name_or_path) if mm is not None else None,
        "dataset": cfg.dataset_names,
        "eval_dataset": cfg.eval_dataset_names,
        "mix_strategy": cfg.mix_strategy,
        "interleave_probs": cfg.interleave_probs,
        "val_size": cfg.val_size,
        "split_seed": cfg.seed if split_seed else None,
    }


def _mismatch(path: Path, key: str, saved: Any, current: Any) -> DataError:
    fix = Said("part_cache_fix_first")
    return DataError(
        Said("cache_mismatch", path=str(path), key=key, saved=repr(saved), current=repr(current), fix=fix)
    )


def check(path: Path, meta: dict, current: dict[str, Any]) -> None:
    """Raise a DataError for the first key whose saved value differs from this config's (an unknown folder too)."""
    saved = meta.get("depends")
    if meta.get("format") != FORMAT or not isinstance(saved, dict):
        raise DataError(Said("cache_old_format", path=str(path), fix=Said("part_cache_fix")))
    if not current["dataset"] and not current["eval_dataset"]:  # no dataset in the config: the folder is the data
        current = {**current, "dataset": saved.get("dataset"), "eval_dataset": saved.get("eval_dataset")}
    for key, value in current.items():
        if key not in saved:
            raise DataError(Said("cache_missing_key", path=str(path), key=key, fix=Said("part_cache_fix")))
        if json.loads(json.dumps(value)) != saved[key]:  # through JSON: tuples and lists compare as saved
            raise _mismatch(path, key, saved[key], value)


def _media_listing(parts) -> dict[str, list[int]]:
    files: dict[str, list[int]] = {}
    for ds in parts:
        for column in MEDIA_COLUMNS:
            if ds is None or column not in ds.column_names:
                continue
            for paths in ds[column]:
                for p in paths or ():
                    if p not in files:
                        st = Path(p).stat()
                        files[p] = [st.st_size, st.st_mtime_ns]
    return files


def check_media(path: Path) -> None:
    """Every media file the saved rows name exists, with the size and modification time it had when tokenized."""
    listing = path / MEDIA
    if not listing.is_file():
        return
    for p, (size, mtime) in json.loads(listing.read_text(encoding="utf-8")).items():
        f = Path(p)
        if not f.is_file():
            raise DataError(Said("cache_media_missing", path=str(path), file=p, fix=Said("part_cache_fix")))
        st = f.stat()
        if [st.st_size, st.st_mtime_ns] != [size, mtime]:
            fix = Said("part_cache_fix")
            raise DataError(Said("cache_media_changed", path=str(path), file=p, size=size, now=st.st_size, fix=fix))


def refuse_foreign(path: Path) -> None:
    """A folder with a saved dataset but no tunekit meta (LLaMA-Factory's layout) is neither read nor overwritten."""
    if (path / "dataset_dict.json").is_file() or (path / "train" / "dataset_info.json").is_file():
        raise DataError(Said("cache_foreign", path=str(path), meta=META))


def save(path: Path, train, evaluation, reports: list[dict], depends: dict[str, Any]) -> None:
    """Write train/eval, the media listing and the meta (last: a crash leaves no folder that looks complete)."""
    path.mkdir(parents=True, exist_ok=True)
    for name in (META, MEDIA, "train", "eval"):  # only tunekit's own entries: the folder may hold other files
        entry = path / name
        if entry.is_dir():
            shutil.rmtree(entry)
        elif entry.exists():
            entry.unlink()
    if train is not None:  # None: evaluating/predicting with eval_dataset only
        train.save_to_disk(str(path / "train"))
    if evaluation is not None:
        evaluation.save_to_disk(str(path / "eval"))
    media = _media_listing([train, evaluation])
    if media:
        (path / MEDIA).write_text(json.dumps(media, ensure_ascii=False), encoding="utf-8")
    meta = {"format": FORMAT, "depends": depends, "reports": reports}
    (path / META).write_text(json.dumps(meta, ensure_ascii=False, indent=1), encoding="utf-8")


def load(path: Path, current: dict[str, Any]):
    """``(train, eval, reports)`` saved at ``path`` after :func:`check` and :func:`check_media`."""
    import datasets

    meta = json.loads((path / META).read_text(encoding="utf-8"))
    check(path, meta, current)
    check_media(path)
    train, evaluation = (
        datasets.load_from_disk(str(path / n)) if (path / n).is_dir() else None for n in ("train", "eval")
    )
    return train, evaluation, meta["reports"]
