#!/usr/bin/env python3
"""Run one training job with benchmarks/_profile.py's ProfileCallback attached, under either tool's interpreter.

    <tunekit python> benchmarks/_profile_run.py tunekit JOB.yaml OUT.json [--profile-step 3] [key=value ...]
    <LF python>      benchmarks/_profile_run.py lf      JOB.yaml OUT.json [--profile-step 3] [key=value ...]

tunekit: the pieces of ``tunekit train`` in the same order (tunekit/train/run.py: config, gradient-checkpointing
decision, TrainingArguments, tokenizer, data, model + method, the stage's trainer), with the callback added to
the trainer. LLaMA-Factory: ``llamafactory.train.tuner.run_exp(args, callbacks=[...])``, its own entry point.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def run_tunekit(job: Path, overrides: list[str], callback) -> None:
    from tunekit.host import malloc as host_malloc

    host_malloc.tune()
    import transformers

    from tunekit.config import load_config
    from tunekit.config.stages import STAGES
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.flow import decide
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.run import get_stage

    cfg = decide(load_config(str(job), overrides))  # auto_fit and gradient_checkpointing: auto, as tunekit train
    stage = get_stage(cfg.stage)
    transformers.set_seed(cfg.seed)
    args = build_training_arguments(cfg, [], save_total_limit=None)
    tokenizer = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tokenizer, cfg.stage)
    model = (
        stage.load_model(cfg, tokenizer)
        if STAGES[cfg.stage].own_model
        else load_model(cfg, tokenizer, is_trainable=True)
    )
    trainer = stage.build_trainer(cfg, args, model, tokenizer, data, [callback])
    trainer.train()


def run_lf(job: Path, overrides: list[str], callback) -> None:
    import yaml
    from llamafactory.train.tuner import run_exp

    args = yaml.safe_load(job.read_text())
    for item in overrides:
        key, _, value = item.partition("=")
        args[key] = yaml.safe_load(value)
    run_exp(args=args, callbacks=[callback])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tool", choices=["tunekit", "lf"])
    ap.add_argument("job")
    ap.add_argument("out")
    ap.add_argument("--profile-step", type=int, default=3)
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args(argv)
    from _profile import ProfileCallback

    cb = ProfileCallback(a.out, a.profile_step, a.tool)
    (run_tunekit if a.tool == "tunekit" else run_lf)(Path(a.job), a.overrides, cb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
