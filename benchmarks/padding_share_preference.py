#!/usr/bin/env python3
"""Padding share of the preference stages (dpo, rm: dpo_en_demo; kto: kto_en_demo): padded, padded +
group_within_step, ``padding_free``.

The batches are the ones training sees: the stage's own trainer (``build_trainer``) and its training DataLoader
(the HF Trainer's shuffled sampler, seed 42), ``cutoff_len`` 1024, ``per_device_train_batch_size`` 2, tunekit's
default ``pad_to_multiple_of`` 8, template ``qwen``, on the Qwen2.5-family model of ``benchmarks/_shapes.py``
("tiny" shape: the tokenizer is the locally trained Qwen-style BPE, the model size does not change the counts).
For each micro-batch: ``batch tokens`` = the elements of every ``*input_ids`` tensor the model is given (KTO: its
examples and its KL pairs), ``real`` = the tokens of the sequences; share = 1 - real / batch tokens.
``padded + group_within_step``: the same DataLoader read one accumulation window (``--accum`` micro-batches) at a time
through the trainer's ``get_batch_samples``, which re-deals each window's pairs by length (``train/pair_grouping.py``;
kto passes through, so its two padded columns agree).
``--time N``: also the seconds of N training steps (forward + backward + AdamW) of each layout, alternating.

    .venv/bin/python benchmarks/padding_share_preference.py [--stages dpo,kto,rm] [--cutoff 1024] [--batch
    2] [--accum 2] [--time 20]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LF_DATA, WORK  # noqa: E402

DATASET = {"dpo": "dpo_en_demo", "rm": "dpo_en_demo", "kto": "kto_en_demo"}


def build(stage: str, padding_free: bool, args, model_dir: Path):
    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.stages import dpo, kto, rm

    cfg = load_config(
        None,
        dict(
            model_name_or_path=str(model_dir),
            stage=stage,
            template="qwen",
            dataset=DATASET[stage],
            dataset_dir=str(LF_DATA),
            cutoff_len=args.cutoff,
            per_device_train_batch_size=args.batch,
            gradient_accumulation_steps=args.accum,
            output_dir=str(WORK / f"pad-share-{stage}"),
            padding_free=padding_free,
            report_to="none",
            save_strategy="no",
            seed=42,
            learning_rate=1e-4,
            max_steps=max(1, args.time),
            logging_steps=1000,
            disable_tqdm=True,
            gradient_checkpointing=False,
        ),
    )
    module = {"dpo": dpo, "kto": kto, "rm": rm}[stage]
    tokenizer = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tokenizer, stage)
    model = module.load_model(cfg, tokenizer) if stage == "rm" else load_model(cfg, tokenizer)
    return module.build_trainer(cfg, build_training_arguments(cfg, []), model, tokenizer, data, [])


def windows(trainer):
    """The training DataLoader's micro-batches, one accumulation window at a time through ``get_batch_samples``."""
    loader = iter(trainer.get_train_dataloader())
    while True:
        window, _ = trainer.get_batch_samples(loader, trainer.args.gradient_accumulation_steps, trainer.args.device)
        if not window:
            return
        yield from window


def count(trainer, regrouped: bool = False) -> dict:
    batch_tokens = real = steps = 0
    for batch in windows(trainer) if regrouped else trainer.get_train_dataloader():
        steps += 1
        for key, value in batch.items():
            if key.endswith("input_ids"):
                batch_tokens += value.numel()
                prefix = key[: -len("input_ids")]
                mask, cu = batch.get(f"{prefix}attention_mask"), batch.get(f"{prefix}cu_seqlens")
                real += int(mask.sum()) if mask is not None else int(cu[-1])
    return {
        "micro_batches": steps,
        "batch_tokens": batch_tokens,
        "real_tokens": real,
        "padding_share": round(1 - real / batch_tokens, 4),
        "tokens_per_micro_batch": round(batch_tokens / steps, 1),
    }


def timed_steps(trainer, n: int) -> float:
    model = trainer.model.train()
    optim = __import__("torch").optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    loader = iter(trainer.get_train_dataloader())
    start = time.perf_counter()
    for _ in range(n):
        loss = trainer.compute_loss(model, next(loader))
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", default="dpo,kto,rm")
    parser.add_argument("--cutoff", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument(
        "--accum", type=int, default=2, help="gradient_accumulation_steps (the group_within_step window)"
    )
    parser.add_argument("--time", type=int, default=0, help="also time this many training steps per layout")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    from _shapes import build_random_model

    model_dir = build_random_model(WORK / "models" / "qwen2.5-tiny-lfdata", "tiny", data_dir=LF_DATA)
    rows = []
    for stage in args.stages.split(","):
        trainers = {free: build(stage, free, args, model_dir) for free in (False, True)}
        row = {"stage": stage, "dataset": DATASET[stage]}
        for free, trainer in trainers.items():
            row["padding_free" if free else "padded"] = count(trainer)
        row["padded + group_within_step"] = count(trainers[False], regrouped=True)
        if args.time:
            seconds = {False: [], True: []}
            for _ in range(2):  # A B A B
                for free in (False, True):
                    seconds[free].append(timed_steps(trainers[free], args.time))
            row["seconds"] = {
                ("padding_free" if k else "padded"): [round(s, 2) for s in v] for k, v in seconds.items()
            }
        rows.append(row)
        a, b, g = row["padded"], row["padding_free"], row["padded + group_within_step"]
        print(
            f"{stage} ({DATASET[stage]}, cutoff {args.cutoff}, batch {args.batch} x accumulation {args.accum}): "
            "padded "
            f"{a['batch_tokens']:,} batch tokens for {a['real_tokens']:,} real = padding share "
            f"{a['padding_share']:.1%}; "
            f"padded + group_within_step {g['batch_tokens']:,} for {g['real_tokens']:,} = {g['padding_share']:.1%}; "
            f"padding-free {b['batch_tokens']:,} for "
            f"{b['real_tokens']:,} = {b['padding_share']:.1%}; {a['micro_batches']} micro-batches"
            + (
                f"; {args.time} steps: padded {row['seconds']['padded']} s, padding-free "
                f"{row['seconds']['padding_free']} s"
                if args.time
                else ""
            ),
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
