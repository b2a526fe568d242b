"""Render a few samples as text pieces with their trainable flag (the web board highlights trained tokens)."""

from __future__ import annotations


def render_samples(cfg, tokenizer, n: int = 3) -> list[list[tuple[str, bool]]]:
    """For the first ``n`` samples of the first dataset: ``[(text, trainable), ...]`` after cutoff and masking."""
    from .dataset_info import resolve_datasets
    from .pipeline import load_one, load_template, make_context

    template = load_template(cfg, tokenizer)
    ctx = make_context(cfg, tokenizer, template)
    attr = resolve_datasets(cfg.dataset_names[:1], cfg.dataset_dir)[0]
    ds, _ = load_one(attr, cfg, ctx, cfg.stage)
    out = []
    for row in ds.select(range(min(n, len(ds)))):
        pieces: list[tuple[str, bool]] = []
        run: list[int] = []
        flag = None
        for tok, lab in zip(row["input_ids"], row["labels"]):
            trainable = lab != -100
            if flag is not None and trainable != flag:
                pieces.append((tokenizer.decode(run), flag))
                run = []
            run.append(tok)
            flag = trainable
        if run:
            pieces.append((tokenizer.decode(run), bool(flag)))
        out.append(pieces)
    return out
