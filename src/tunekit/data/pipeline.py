"""From config to tokenized train/eval datasets: the one data path every verb uses.

``prepare_datasets(cfg, tokenizer, stage)`` resolves the dataset names, reads and validates every
record, converts it to the canonical form, tokenizes with the stage's processor through
``datasets.map`` (batched, ``preprocessing_num_workers``, cached by fingerprint), drops samples with no
trainable tokens, mixes datasets, and splits off ``val_size`` with a seeded permutation. With
``tokenized_path`` the result is saved, and reused only by a config it was made for (``tokenized_cache``).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..config.problems import Said, config_error, message_of
from ..config.schema import Config
from ..errors import DataError
from . import tokenized_cache
from .cache import cache_root, fingerprint, media_options, source_signature, tokenization_options, tokenizer_signature
from .dataset_info import DatasetAttr, resolve_datasets
from .formats import RecordError, convert_record
from .mm_plugins import load_plugin, media_root
from .mm_plugins.settings import set_options
from .processors import DROPPED, TRUNCATED, get_processor
from .processors import media as media_processor
from .processors.context import ProcessContext
from .processors.media import prepare_media
from .processors.packing import pack_dataset
from .processors.pt import announce_document_end
from .readers import read_records
from .report import DatasetReport
from .sampling import check_sampling_names, select_records
from .split import split_sizes
from .templates import get_template
from .templates.registry import SPECS
from .templates.tokenizer_fix import fix_tokenizer

MAX_LISTED = 1000  # sources listed per category in the report file


@dataclass
class PreparedData:
    train: Any = None  # datasets.Dataset
    eval: Any = None
    reports: list[DatasetReport] = field(default_factory=list)
    template: Any = None
    mm: Any = None  # the media plugin of a multimodal template (data/mm_plugins), for the collator


def load_template(cfg: Config, tokenizer, stage: str | None = None):
    if not cfg.template and (stage or cfg.stage) == "pt":  # plain text needs no chat template (processors/pt.py)
        fix_tokenizer(tokenizer, [], [])  # only a PAD (and EOS) where the tokenizer has none
        return None
    if not cfg.template:
        raise config_error("data_template_not_set", ("template",))
    template = get_template(cfg.template, tokenizer, tool_format=cfg.tool_format, empty_eos=cfg.empty_template_eos)
    template.fix_tokenizer(tokenizer)
    return template


def check_thought_markers(cfg: Config, template) -> None:
    """``thought_loss_weight`` below 1 and ``preserve_thinking`` need a template that writes a reply's thought as its
    own block (``spec.reasoning``, listed from the registry); any other template renders a thought, if at all, as
    reply text."""
    check_preserve_thinking(cfg, template)
    if (
        cfg.thought_loss_weight == 1
        or template is None
        or getattr(getattr(template, "spec", None), "reasoning", False)
    ):
        return
    raise config_error(
        "data_thought_weight_template",
        ("thought_loss_weight", "template"),
        weight=cfg.thought_loss_weight,
        templates=thought_templates(),
        template=str(cfg.template),
    )


def thought_templates() -> str:
    """The templates with thought markers, in the registry's order (``spec.reasoning``)."""
    return ", ".join(spec.name for spec in SPECS if spec.reasoning)


def check_preserve_thinking(cfg: Config, template) -> None:
    if not cfg.preserve_thinking or template is None or getattr(getattr(template, "spec", None), "reasoning", True):
        return  # template: jinja (no spec) passes preserve_thinking to the tokenizer's chat_template
    raise config_error(
        "data_preserve_thinking_template",
        ("preserve_thinking", "template"),
        templates=thought_templates(),
        template=str(cfg.template),
    )


def make_context(cfg: Config, tokenizer, template) -> ProcessContext:
    check_thought_markers(cfg, template)
    return ProcessContext(
        tokenizer=tokenizer,
        template=template,
        cutoff_len=cfg.cutoff_len,
        train_on_prompt=cfg.train_on_prompt,
        mask_history=cfg.mask_history,
        enable_thinking=cfg.enable_thinking,
        preserve_thinking=cfg.preserve_thinking,
        thought_weight=cfg.thought_loss_weight,
        default_system=cfg.default_system,
        packing=cfg.use_packing,
        mm=load_plugin(cfg, cfg.template),
        media_root=str(media_root(cfg)),
    )


def prepare_datasets(cfg: Config, tokenizer, stage: str | None = None) -> PreparedData:
    stage = stage or cfg.stage
    check_sampling_names(cfg.dataset_sampling, cfg.dataset_names or [], cfg.eval_dataset_names or [])
    reuse = cfg.tokenized_path and Path(cfg.tokenized_path, tokenized_cache.META).is_file() and not cfg.overwrite_cache
    if (
        not reuse and not cfg.dataset_names and (cfg.do_train or not cfg.eval_dataset_names)
    ):  # evaluating/predicting only: eval_dataset suffices
        raise config_error("data_dataset_not_set", ("dataset",))
    template = load_template(cfg, tokenizer, stage)
    ctx = make_context(cfg, tokenizer, template)
    if stage == "pt":  # said here too, so a run that loads the tokenized data from the cache says it as well
        announce_document_end(tokenizer, template)
    if reuse:  # template and media plugin rebuilt as above: the collator and the saved tokenizer need them
        train, evaluation, reports = tokenized_cache.load(Path(cfg.tokenized_path), _depends(cfg, ctx, stage))
        return PreparedData(
            train=train,
            eval=evaluation,
            reports=[DatasetReport.from_dict(r) for r in reports],
            template=template,
            mm=ctx.mm,
        )
    if cfg.tokenized_path and not cfg.overwrite_cache:
        tokenized_cache.refuse_foreign(Path(cfg.tokenized_path))
    train, train_reports = _load_many(cfg.dataset_names, cfg, ctx, stage) if cfg.dataset_names else (None, [])
    reports = list(train_reports)
    evaluation = None
    if cfg.eval_dataset_names:
        evaluation, eval_reports = _load_many(cfg.eval_dataset_names, cfg, ctx, stage)
        reports += eval_reports
    elif cfg.val_size > 0:
        train, evaluation = split_train_eval(train, cfg.val_size, cfg.seed)
    data = PreparedData(train=train, eval=evaluation, reports=reports, template=template, mm=ctx.mm)
    if cfg.tokenized_path:
        tokenized_cache.save(
            Path(cfg.tokenized_path),
            data.train,
            data.eval,
            [r.to_dict() for r in data.reports],
            _depends(cfg, ctx, stage),
        )
    return data


def _depends(cfg: Config, ctx: ProcessContext, stage: str) -> dict:
    depends = tokenized_cache.depends_on(cfg, ctx.tokenizer, ctx.template, ctx.mm, stage)
    names = [*(cfg.dataset_names or []), *(cfg.eval_dataset_names or [])]
    if names:  # without a dataset the saved folder is the data: nothing to compare its num_samples with
        attrs = resolve_datasets(names, cfg.dataset_dir)  # dataset_info.json's num_samples and the seed picking them
        depends["num_samples"] = {a.name: [a.num_samples, cfg.seed] for a in attrs if a.num_samples}
    return depends


def split_train_eval(dataset, val_size: float, seed: int):
    import numpy as np

    n = len(dataset)
    n_train, n_eval = split_sizes(n, val_size)
    if n_train < 1:
        raise config_error("data_val_size_no_train", ("val_size",), val_size=val_size, count=n)
    perm = np.random.default_rng(seed).permutation(n)
    evaluation = dataset.select(np.sort(perm[:n_eval]))
    train = dataset.select(np.sort(perm[n_eval:]))
    return train, evaluation


def _load_many(names: list[str], cfg: Config, ctx: ProcessContext, stage: str):
    attrs = resolve_datasets(names, cfg.dataset_dir)
    for attr in attrs:  # every dataset's kind before the first is read
        check_kind_fits_stage(attr, stage)
    parts, reports = [], []
    for attr in attrs:
        ds, report = load_one(attr, cfg, ctx, stage)
        parts.append(ds)
        reports.append(report)
    return _mix(parts, cfg), reports


#: stages that train on one reply per sample, which preference data (a chosen and a rejected reply) does not have
_SINGLE_REPLY_STAGES = ("pt", "sft", "kto")


def check_kind_fits_stage(attr: DatasetAttr, stage: str) -> None:
    """Preference data (``ranking: true``) given to a stage that trains on single replies is refused by dataset
    before a record is read, instead of a per-record error that does not say what is wrong."""
    if attr.ranking and stage in _SINGLE_REPLY_STAGES:
        kind = Said("part_kind_texts" if stage == "pt" else "part_kind_conversations")
        raise DataError(Said("data_preference_for_single_reply", name=attr.name, stage=stage, kind=kind))


def _mix(parts, cfg: Config):
    import datasets

    if len(parts) == 1:
        return parts[0]
    if cfg.mix_strategy == "concat":
        return datasets.concatenate_datasets(parts)
    probs = [float(p) for p in cfg.interleave_probs.split(",")] if cfg.interleave_probs else None
    if probs is not None and len(probs) != len(parts):
        raise config_error(
            "data_interleave_probs_count", ("interleave_probs", "dataset"), probs=len(probs), datasets=len(parts)
        )
    strategy = "first_exhausted" if cfg.mix_strategy == "interleave_under" else "all_exhausted"
    return datasets.interleave_datasets(parts, probabilities=probs, seed=cfg.seed, stopping_strategy=strategy)


def _fingerprint(attr: DatasetAttr, cfg: Config, ctx: ProcessContext, stage: str) -> str:
    template_sig = ctx.template.chat_template_jinja() if hasattr(ctx.template, "chat_template_jinja") else None
    drawn = attr.num_samples or (cfg.dataset_sampling or {}).get(attr.name)
    sampling = {"num_samples_seed": cfg.seed} if drawn else {}  # the records num_samples / dataset_sampling pick
    return fingerprint(
        {
            **sampling,
            "source": source_signature(attr.path)
            if attr.load_from == "file"
            else [attr.path, attr.split, attr.subset],
            "attr": {k: v for k, v in attr.__dict__.items() if k != "info_file"},
            "stage": stage,
            "template": [cfg.template, repr(template_sig)],
            "tokenizer": tokenizer_signature(ctx.tokenizer),
            "options": tokenization_options(cfg),
            "media": [
                cfg.media_dir,
                media_options(cfg),
                set_options(cfg),
                tokenized_cache._processor_signature(cfg.model_name_or_path),
            ]
            if ctx.mm is not None
            else None,  # the folder's settings apply unless set
        }
    )


def load_one(attr: DatasetAttr, cfg: Config, ctx: ProcessContext, stage: str):
    """Tokenize one dataset (or load it from the cache); returns ``(dataset, report)``."""
    import datasets

    check_kind_fits_stage(attr, stage)
    key = _fingerprint(attr, cfg, ctx, stage)
    entry = cache_root() / key
    if (entry / "report.json").is_file() and not cfg.overwrite_cache:
        report = DatasetReport.from_dict(json.loads((entry / "report.json").read_text(encoding="utf-8")))
        return datasets.load_from_disk(str(entry / "data")), report

    report = DatasetReport(name=attr.name)
    raws = read_records(attr, cache_dir=cfg.cache_dir, bad_records=cfg.bad_records)
    raws, report.sampled = select_records(raws, attr.name, attr.num_samples, cfg)
    report.records = len(raws)
    samples, first_problem = [], None  # the first invalid record's error, keyed (said again in any language)
    for raw in raws:
        try:
            samples.append(prepare_media(convert_record(raw, attr, stage), ctx, stage))
        except RecordError as exc:
            if cfg.bad_records == "error":
                raise DataError(Said("data_bad_record", error=message_of(exc), name=attr.name)) from None
            report.invalid += 1
            first_problem = message_of(exc) if first_problem is None else first_problem
            if len(report.invalid_examples) < MAX_LISTED:
                report.invalid_examples.append(str(exc))
    if not samples:
        first = Said("part_first_problem", problem=first_problem) if first_problem is not None else None
        raise DataError(
            Said(
                "data_no_usable_records",
                name=attr.name,
                path=str(attr.path),
                read=report.records,
                invalid=report.invalid,
                first=first,
            )
        )

    processor = get_processor(stage) if ctx.mm is None else media_processor.processor_for(stage)
    raw_ds = datasets.Dataset.from_list(samples)
    workers = (
        cfg.preprocessing_num_workers
        if (cfg.preprocessing_num_workers or 1) > 1 and len(raw_ds) >= 2 * cfg.preprocessing_batch_size
        else None
    )
    tokenized = raw_ds.map(
        partial(processor.process, ctx=ctx),
        batched=True,
        batch_size=cfg.preprocessing_batch_size,
        num_proc=workers,
        remove_columns=raw_ds.column_names,
        desc=f"Tokenizing {attr.name}",
        load_from_cache_file=False,
        # tunekit's own key names the result; datasets would otherwise dill-hash the processor (~0.3 s)
        new_fingerprint=key,
    )
    import numpy as np

    status = np.asarray(tokenized["_status"])
    sources = tokenized["_source"]
    dropped_idx = np.flatnonzero(status == DROPPED)
    truncated_idx = np.flatnonzero(status == TRUNCATED)
    report.dropped, report.truncated = int(len(dropped_idx)), int(len(truncated_idx))
    report.dropped_sources = [sources[i] for i in dropped_idx[:MAX_LISTED]]
    report.truncated_sources = [sources[i] for i in truncated_idx[:MAX_LISTED]]
    if len(dropped_idx):
        tokenized = tokenized.select(np.flatnonzero(status != DROPPED))
    report.kept = len(tokenized)
    if report.kept == 0:
        examples = ", ".join(report.dropped_sources[:3])
        said = Said("data_all_dropped", name=attr.name, path=str(attr.path), cutoff=cfg.cutoff_len, examples=examples)
        raise DataError(said)
    if stage == "sft" and ctx.packing:
        tokenized = pack_dataset(tokenized, cfg.cutoff_len, neat=cfg.neat_packing)
    _store(entry, tokenized, report)
    return datasets.load_from_disk(str(entry / "data")), report


def _store(entry: Path, dataset, report: DatasetReport) -> None:
    """Write the cache entry under a temporary name, then rename: a crash never leaves a half entry."""
    tmp = entry.with_name(f"{entry.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    dataset.save_to_disk(str(tmp / "data"))
    (tmp / "report.json").write_text(json.dumps(report.to_dict(), ensure_ascii=False), encoding="utf-8")
    if entry.exists():
        shutil.rmtree(entry, ignore_errors=True)
    try:
        tmp.rename(entry)
    except OSError:  # another process stored the same entry first
        shutil.rmtree(tmp, ignore_errors=True)
