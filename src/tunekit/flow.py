"""The training recipe, above the layers: what ``tunekit train``, the web board (which runs ``tunekit train``), tests
and benchmarks all call. :func:`run_train` reads top to bottom:

load the config → resolve the device and the engine (``train/machine.run_machine``) → prepare the data
(``train/run.prepare_data``) → decide the run (``plan/decide.decide_run``: one ``RunDecisions`` — engine, attention,
precision, every memory feature, checkpointing, batching) → build the model → build the trainer → train, save,
evaluate (``train/run.execute``) → predict through :mod:`tunekit.infer`.

Each step is a function of a lower layer that returns what the next needs; nothing below calls back up. The CPU-host
machinery (``tunekit.host``: malloc tuning, the collector pause, the heap guard) is started only when the decisions
for the device the run uses say so, so a GPU run never imports it.

It sits above ``train``, ``plan`` and ``infer`` (it needs all three) and below ``serve``/``webui``/``cli``;
nothing below imports it (``tests/project/test_import_graph.py``).
"""

from __future__ import annotations

from .config import load_config
from .config.schema import Config
from .config.stages import STAGES
from .infer.engine import ChatEngine
from .infer.predict import run_predict
from .plan import apply_auto_fit
from .plan.decide import decide_run
from .train import run as steps
from .train.decisions import RunDecisions, decide_host
from .train.engines import distributed
from .train.machine import Machine, run_machine
from .train.precision import run_precision
from .train.preflight import preflight
from .train.quiet import quiet_library_notices


def decide(cfg: Config) -> Config:
    """``cfg`` with ``auto_fit`` applied, as training runs it (before the data is read)."""
    if cfg.auto_fit:
        cfg = apply_auto_fit(cfg)
    return cfg


def start_host(cfg: Config, machine: Machine) -> dict:
    """The CPU-host features of a run on ``machine`` (``train/decisions/cpu_host.py``): the collector paused until the
    run settles it, glibc's malloc tuned; nothing (no import of ``tunekit.host``) where they are off."""
    host = decide_host(cfg, machine)
    if host["gc_pause"].on:
        from .host import gc_pause

        gc_pause.pause()  # until train/run.py settles it: see tunekit/host/gc_pause.py
    if host["malloc_tune"].on:
        from .host import malloc

        malloc.tune()  # freed tensors stay in the heap for the next step: see tunekit/host/malloc.py
    return host


def announce(decisions: RunDecisions) -> None:
    """What the run decided, in a line or two, on the main process (``tunekit plan`` shows each reason)."""
    if not distributed.is_main_process():
        return
    if decisions.checkpointing_note:
        print(decisions.checkpointing_note, flush=True)
    on = [name for name, d in decisions.features().items() if d.on]
    print(
        f"run: {decisions.machine.kind} x {decisions.machine.processes} ({decisions.engine}); on: "
        f"{', '.join(on) or 'nothing'}",
        flush=True,
    )


def predict(cfg: Config, trainer, tokenizer, data) -> dict:
    """``do_predict``: generate for eval_dataset (else dataset) with the trained model and score it (main process)."""
    if not trainer.is_world_process_zero():
        return {}
    engine = ChatEngine(cfg, model=trainer.model, tokenizer=tokenizer, template=data.template)
    return run_predict(cfg, engine=engine)


def run_train(cfg: Config, config_path: str | None = None, machine: Machine | None = None) -> dict:
    """Train ``cfg`` in this process (already relaunched if it needed to be); ``machine``: the device the run uses
    (default: :func:`~tunekit.train.machine.run_machine`). The one function that trains."""
    quiet_library_notices(cfg)  # before the planner's imports too (train/quiet.py)
    cfg = decide(cfg)  # auto_fit
    machine = machine or run_machine(cfg)  # the device and the engine the run uses
    cfg, precision = run_precision(cfg, machine)  # as options (train/precision.py), printed: before the resume check
    resume = steps.start_run(cfg)  # model path, output_dir, the resume plan
    if resume.finished is not None:
        return dict(resume.finished)  # resuming a finished run: nothing to do (plan_resume said so)
    prepared = steps.prepare_data(cfg, settle_gc=decide_host(cfg, machine)["gc_pause"].on)
    decisions = decide_run(
        cfg, machine, longest_row=prepared.longest_row, precision=precision
    )  # same rows: every rank
    cfg = decisions.cfg
    announce(decisions)
    model = steps.build_model(cfg, decisions, prepared)
    built = steps.build_trainer(cfg, decisions, prepared, model)
    results = steps.execute(cfg, built, resume)
    if cfg.do_predict and STAGES[cfg.stage].predict:  # generation is scored for sft runs (LLaMA-Factory's predict)
        results.update(predict(cfg, built.trainer, built.tokenizer, built.data) or {})
    steps.report_done(cfg, results)
    return results


def train_command(argv: list[str], path: str | None, overrides: list[str]) -> int:
    """``tunekit train ARGV`` (ARGV = the config ``path`` and its ``overrides``): load the config, resolve the device
    (the CPU-host machinery started for a CPU run), relaunch under torchrun when needed, then :func:`run_train`."""
    cfg = load_config(path, overrides)
    machine = run_machine(cfg)
    start_host(cfg, machine)
    preflight(cfg, machine)  # every refusal that needs only the config and the machine, before any process starts
    code = distributed.maybe_relaunch(argv, cfg)
    if code is not None:
        return code
    run_train(cfg, config_path=path, machine=machine)
    distributed.shutdown()  # leave the process group cleanly: gloo can abort (SIGABRT) at exit otherwise
    return 0
