"""Token lengths of every sample, tokenized exactly as training does but before any cutoff (for ``data stats`` and ``plan``)."""

from __future__ import annotations

UNLIMITED = 10**9


def measure_lengths(cfg, tokenizer, stage: str | None = None):
    """A ``datasets.Dataset`` with columns dataset, prompt_len, response_len, total_len, trainable_len."""
    import datasets

    from .dataset_info import resolve_datasets
    from .pipeline import load_one, load_template, make_context

    stage = stage or cfg.stage
    uncut = cfg.model_copy(update={"cutoff_len": UNLIMITED})
    template = load_template(cfg, tokenizer)
    ctx = make_context(uncut, tokenizer, template)
    parts = []
    for attr in resolve_datasets(cfg.dataset_names, cfg.dataset_dir):
        ds, _ = load_one(attr, uncut, ctx, stage)
        n = len(ds)
        parts.append(datasets.Dataset.from_dict({
            "dataset": [attr.name] * n,
            "prompt_len": ds["_prompt_len"],
            "response_len": ds["_response_len"],
            "total_len": ds["length"],
            "trainable_len": ds["_trainable"],
        }))
    return datasets.concatenate_datasets(parts) if len(parts) > 1 else parts[0]
