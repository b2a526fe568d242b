"""``tunekit train CONFIG.yaml [key=value ...] [--key value ...]``."""

from __future__ import annotations

import sys

HELP = """usage: tunekit train [CONFIG.yaml|.json] [key=value ...] [--key value ...]

Train a model. Options come from the config file, then the command line (later wins).
Option names follow LLaMA-Factory and Hugging Face TrainingArguments.
"""


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        from .options_help import format_options_help

        sys.stdout.write(HELP + format_options_help())
        return 0
    from tunekit import host_malloc, startup_gc

    startup_gc.pause()  # until run_train settles it: see tunekit/startup_gc.py
    host_malloc.tune()  # freed tensors stay in the heap for the next step: see tunekit/host_malloc.py
    from tunekit.config import load_config
    from tunekit.train import distributed

    path, rest = split_config_path(argv)
    cfg = load_config(path, rest)
    code = distributed.maybe_relaunch(argv, cfg)
    if code is not None:
        return code
    if cfg.auto_fit:
        from tunekit.plan import apply_auto_fit

        cfg = apply_auto_fit(cfg)
    if cfg.do_train:
        from tunekit.plan.checkpointing import resolve_gradient_checkpointing
        from tunekit.train.distributed import is_main_process

        cfg, decision = resolve_gradient_checkpointing(cfg)
        if decision is not None and is_main_process():
            print(decision.message(), flush=True)
    from tunekit.train.run import run_train

    run_train(cfg, config_path=path)
    distributed.shutdown()  # leave the process group cleanly: gloo can abort (SIGABRT) at exit otherwise
    return 0


def split_config_path(argv: list[str]) -> tuple[str | None, list[str]]:
    if argv and not argv[0].startswith("-") and "=" not in argv[0]:
        return argv[0], argv[1:]
    return None, argv
