"""Token lengths of every sample, tokenized as training does but before any cutoff (for ``data stats`` and ``plan``).

Columns for every stage: ``dataset``, ``total_len`` (what ``cutoff_len`` is compared with) and
``trainable_len``; then per stage:

* sft: ``prompt_len``, ``response_len``;
* rm / dpo: ``prompt_len``, ``chosen_len``, ``rejected_len`` and ``longest_len`` (the longer answer, which
  decides truncation: ``total_len = prompt_len + longest_len``);
* kto: ``prompt_len``, ``response_len`` and ``kto_tag`` (desirable or not);
* pt: ``document_len`` (BOS + text + document end, one row per document: packing is what ``data stats``
  simulates from these);
* ppo / grpo: ``prompt_len`` (the generation prompt).

Multimodal data (a family template) adds, per sample, ``images`` / ``videos`` / ``audios`` (how many) and
``image_tokens`` / ``video_tokens`` / ``audio_tokens`` (the family's media tokens in the ids: each placeholder's
expansion, part of ``total_len``), and ``source`` (file and record), so ``data stats`` can name the samples whose
media alone exceed ``cutoff_len``.
"""

from __future__ import annotations

from ..config.schema import Config
from .dataset_info import resolve_datasets
from .pipeline import load_one, load_template, make_context

UNLIMITED = 10**9


def _columns(ds, stage: str) -> dict[str, list]:
    """The length columns of one tokenized (uncut) dataset of ``stage``."""
    total = ds["length"]
    if stage in ("rm", "dpo"):
        prompt = ds["_prompt_len"]
        chosen = [len(x) - p for x, p in zip(ds["chosen_input_ids"], prompt)]
        rejected = [len(x) - p for x, p in zip(ds["rejected_input_ids"], prompt)]
        longest = [max(c, r) for c, r in zip(chosen, rejected)]
        return {
            "prompt_len": prompt,
            "chosen_len": chosen,
            "rejected_len": rejected,
            "longest_len": longest,
            "total_len": total,
            "trainable_len": [c + r for c, r in zip(chosen, rejected)],
        }
    if stage == "kto":
        prompt = ds["_prompt_len"]
        response = [t - p for t, p in zip(total, prompt)]
        return {
            "prompt_len": prompt,
            "response_len": response,
            "total_len": total,
            "trainable_len": response,
            "kto_tag": [bool(x) for x in ds["kto_tag"]],
        }
    if stage == "pt":
        return {"document_len": total, "total_len": total, "trainable_len": total}
    if stage in ("ppo", "grpo"):
        return {"prompt_len": total, "total_len": total, "trainable_len": [0] * len(total)}
    return {
        "prompt_len": ds["_prompt_len"],
        "response_len": ds["_response_len"],
        "total_len": total,
        "trainable_len": ds["_trainable"],
    }


def measure_lengths(cfg: Config, tokenizer, stage: str | None = None):
    """A ``datasets.Dataset`` with the columns of ``stage`` (module docstring), one row per sample."""
    import datasets

    stage = stage or cfg.stage
    # packing off: pt is measured per document (one giant block per map batch would say nothing)
    uncut = cfg.model_copy(update={"cutoff_len": UNLIMITED, "packing": False, "neat_packing": False})
    template = load_template(cfg, tokenizer)
    ctx = make_context(uncut, tokenizer, template)
    parts = []
    for attr in resolve_datasets(cfg.dataset_names, cfg.dataset_dir):
        ds, _ = load_one(attr, uncut, ctx, stage)
        media = _media_columns(ds, ctx.mm) if ctx.mm is not None else {}
        parts.append(datasets.Dataset.from_dict({"dataset": [attr.name] * len(ds), **_columns(ds, stage), **media}))
    return datasets.concatenate_datasets(parts) if len(parts) > 1 else parts[0]


MEDIA_KINDS = ("image", "video", "audio")


def media_token_kinds(mm) -> dict[str, set[int]]:
    """The family's media token ids by kind: video pads (Qwen-VL's ``<|video_pad|>``) apart from the image (or audio)
    ones."""
    ids = set(mm.media_token_ids())
    named = getattr(mm, "token_ids", {}) or {}
    video = {i for t, i in named.items() if t == "<|video_pad|>"}
    kind = "audio" if tuple(mm.MEDIA) == ("audios",) else "image"
    return {kind: ids - video, "video": video}


def _media_columns(ds, mm) -> dict[str, list]:
    """Per sample: how many media of each kind and how many tokens they became (counted in the ids)."""
    kinds = media_token_kinds(mm)
    out: dict[str, list] = {f"{k}_tokens": [] for k in MEDIA_KINDS}
    column = (
        "input_ids" if "input_ids" in ds.column_names else "chosen_input_ids"
    )  # dpo: the prompt (and its media) once
    for ids in ds[column]:
        for k in MEDIA_KINDS:
            wanted = kinds.get(k, set())
            out[f"{k}_tokens"].append(sum(1 for t in ids if t in wanted) if wanted else 0)
    for k in MEDIA_KINDS:
        col = f"{k}s"
        out[col] = [len(x or []) for x in ds[col]] if col in ds.column_names else [0] * len(ds)
    out["source"] = list(ds["_source"]) if "_source" in ds.column_names else [""] * len(ds)
    return out
