"""The one train flow, above the layers: what ``tunekit train``, the web board (which runs ``tunekit train``),
tests and benchmarks all call.

config (:func:`tunekit.config.load_config`) → relaunch under torchrun when several processes are needed
(:func:`tunekit.train.engines.distributed.maybe_relaunch`) → ``auto_fit`` (:func:`tunekit.plan.apply_auto_fit`) →
build and execute (:func:`tunekit.train.run.run_train`), which tokenizes the data and then asks
:func:`decide_with_data` for ``gradient_checkpointing: auto`` (:func:`tunekit.plan.checkpointing.
resolve_gradient_checkpointing`, at the data's longest training row) before it loads the model → ``do_predict``
through :mod:`tunekit.infer`.

It sits above ``train``, ``plan`` and ``infer`` (it needs all three) and below ``serve``/``webui``/``cli``;
nothing below imports it (``tests/test_import_graph.py``).
"""

from __future__ import annotations


def decide(cfg):
    """``cfg`` with ``auto_fit`` applied, as training runs it (before the data is read)."""
    if cfg.auto_fit:
        from .plan import apply_auto_fit

        cfg = apply_auto_fit(cfg)
    return cfg


def decide_with_data(cfg, data):
    """``cfg`` with ``gradient_checkpointing: auto`` decided for the tokenized training rows of ``data`` (the longest
    row: a padded batch is as long as its longest row; packed rows are the packs)."""
    if not cfg.do_train:
        return cfg
    from .plan.checkpointing import resolve_gradient_checkpointing
    from .train.engines.distributed import is_main_process

    rows = data.train["length"] if data is not None and data.train is not None and len(data.train) else None
    cfg, decision = resolve_gradient_checkpointing(cfg, longest_row=max(rows) if rows is not None else None)
    if decision is not None and is_main_process():
        print(decision.message(), flush=True)
    return cfg


def predict(cfg, trainer, tokenizer, data) -> dict:
    """``do_predict``: generate for eval_dataset (else dataset) with the trained model and score it (main process)."""
    if not trainer.is_world_process_zero():
        return {}
    from .infer.engine import ChatEngine
    from .infer.predict import run_predict

    engine = ChatEngine(cfg, model=trainer.model, tokenizer=tokenizer, template=data.template)
    return run_predict(cfg, engine=engine)


def run_train(cfg, config_path: str | None = None) -> dict:
    """Train ``cfg`` in this process (already relaunched if it needed to be): decide, build, execute, predict."""
    from .train.quiet import quiet_library_notices
    from .train.run import run_train as build_and_execute

    quiet_library_notices(cfg)  # before the planner's imports too (train/quiet.py)
    return build_and_execute(decide(cfg), config_path=config_path, predict=predict, decide_with_data=decide_with_data)


def train_command(argv: list[str], path: str | None, overrides: list[str]) -> int:
    """``tunekit train ARGV`` (ARGV = the config ``path`` and its ``overrides``): load the config, relaunch under
    torchrun when needed, then :func:`run_train`."""
    from .config import load_config
    from .train.engines import distributed
    from .train.preflight import preflight

    cfg = load_config(path, overrides)
    preflight(cfg)  # every refusal that needs only the config and the machine, before any process starts
    code = distributed.maybe_relaunch(argv, cfg)
    if code is not None:
        return code
    run_train(cfg, config_path=path)
    distributed.shutdown()  # leave the process group cleanly: gloo can abort (SIGABRT) at exit otherwise
    return 0

