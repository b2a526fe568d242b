"""The build steps of one training run, which the recipe (``tunekit/flow.py``'s ``run_train``) calls in order:

:func:`start_run` (output folder checks, resume plan) → :func:`prepare_data` (trackers, TrainingArguments, tokenizer,
datasets tokenized once, cached) → [the flow decides the run: ``RunDecisions``] → :func:`build_model` (model + method)
→ :func:`build_trainer` (the stage's trainer, under the decisions) → :func:`execute` (train with resume, save,
metrics, plots, eval). Nothing here calls back up: the flow passes the decisions down.
"""

from __future__ import annotations

import importlib
import resource
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import config_to_dict, save_config
from ..config.loader import check_writable_folder
from ..config.problems import config_error
from ..config.schema import Config
from ..config.stages import STAGES as _REGISTRY
from ..config.stages import StageModule
from ..data.pipeline import prepare_datasets
from ..data.report import print_reports, write_reports
from ..errors import TunekitError
from ..model.finetuning import count_parameters, save_pissa_converted
from ..model.loader import load_model, load_tokenizer, model_path
from ..model.moe import moe_start_lines
from .arguments import build_training_arguments
from .checkpoints import apply_clear, disk_full_error, purge_trash
from .decisions import building_with
from .engines import distributed
from .engines.distributed import is_main_process
from .engines.media_ranks import check_media_on_every_rank
from .plotting import plot_loss
from .precision import precision_notes
from .quiet import quiet_library_notices
from .resume import ResumePlan, plan_resume
from .trackers import check_trackers, tracker_callbacks

STAGES = {name: stage.trainer for name, stage in _REGISTRY.items()}  # config/stages.py is the registry

# Files tunekit itself may leave in output_dir before training starts (not "user data").
_OWN_FILES = {"tunekit_config.yaml", "preprocessing_report.json"}


def get_stage(stage: str):
    if stage not in STAGES:
        raise config_error("run_stage_unavailable", ("stage",), stage=stage, names=tuple(STAGES))
    module: StageModule = importlib.import_module(STAGES[stage])
    return module


def log(msg: str) -> None:
    if is_main_process():
        print(msg, flush=True)


def check_output_dir(cfg: Config) -> None:
    if not cfg.output_dir:
        raise config_error("run_output_unset", ("output_dir",))
    out = Path(cfg.output_dir)
    if out.exists() and not out.is_dir():
        raise config_error("run_output_is_file", ("output_dir",), path=str(out))

    check_writable_folder(out, "output_dir")  # /proc/x, a read-only mount: refused before anything loads
    if not cfg.do_train or cfg.overwrite_output_dir or cfg.resume_from_checkpoint not in (None, False):
        return
    if out.is_dir():
        contents = sorted(p.name for p in out.iterdir() if p.name not in _OWN_FILES)
        if contents:
            shown = ", ".join(contents[:5]) + (" ..." if len(contents) > 5 else "")
            raise config_error("run_output_not_empty", ("output_dir",), path=str(out), shown=shown)


def peak_memory_mb() -> dict:
    import torch

    out = {"peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if torch.cuda.is_available():
        out["peak_gpu_memory_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return out


def evaluation_of_final_weights(trainer, cfg: Config) -> dict | None:
    """The metrics of the evaluation the Trainer already ran on the weights training ended with, if any.

    With ``eval_strategy`` steps or epoch, HF evaluates at the last step too; evaluating the same weights
    on the same data again after training (what ``do_eval`` asks for) would repeat a whole pass over the
    validation set for the same numbers. Not reused when the weights changed since (``load_best_model_at_end``)
    or when training did not run.
    """
    if not cfg.do_train or cfg.load_best_model_at_end:
        return None
    step, metrics = trainer.state.global_step, {}
    for row in trainer.state.log_history:
        if row.get("step") == step and any(key.startswith("eval_") for key in row):
            metrics.update({key: value for key, value in row.items() if key.startswith("eval_") or key == "epoch"})
    return metrics or None


def _raise_if_disk_full(exc: Exception, trainer, cfg: Config, final: bool = False) -> None:
    """A full disk while training or saving: the partial checkpoint removed, the intact one named (checkpoints.py)."""
    if isinstance(exc, TunekitError) or not is_main_process():
        return
    error = disk_full_error(exc, cfg.output_dir, trainer.state.global_step, final=final)
    if error is not None:
        raise error from exc


@dataclass
class Prepared:
    """What :func:`prepare_data` set up before anything is decided from the data."""

    args: Any  # TrainingArguments
    tokenizer: Any
    data: Any
    report_to: Any
    stage: Any  # the stage's trainer module

    @property
    def longest_row(self) -> int | None:
        """The longest tokenized training row (a padded batch is as long as its longest row; packed rows are the
        packs), what ``gradient_checkpointing: auto`` is decided at; None without training rows."""
        train = self.data.train if self.data is not None else None
        return max(train["length"]) if train is not None and len(train) else None


@dataclass
class BuiltRun:
    """What :func:`build_trainer` set up: the trainer and what it was built from."""

    trainer: Any
    tokenizer: Any
    data: Any
    stopper: Any
    cfg: Any  # the config the model and trainer were built with (the decided one)
    decisions: Any = None  # the RunDecisions they read (train/decisions)


def start_run(cfg: Config):
    """The checks that need nothing loaded (model path, output_dir) and the resume plan (train/checkpoints.py)."""
    model_path(cfg)  # a wrong path fails here, in milliseconds
    check_output_dir(cfg)
    if (
        not cfg.do_train and "do_train" not in cfg.model_fields_set
    ):  # LLaMA-Factory's predict/eval-only configs (schema.py)
        asked = [k for k in ("do_eval", "do_predict") if getattr(cfg, k)]
        doing = " and ".join({"do_eval": "evaluating", "do_predict": "predicting"}[k] for k in asked)
        log(
            f"do_train is not set and {' and '.join(asked)} {'are' if len(asked) > 1 else 'is'}: "
            f"only {doing} (set do_train: true to train first)"
        )
    plan = (
        plan_resume(
            cfg.output_dir,
            cfg.resume_from_checkpoint,
            bool(cfg.deepspeed),
            config_to_dict(cfg),
            distributed.world_size(cfg),
            cfg.overwrite_output_dir,
        )
        if cfg.do_train
        else ResumePlan()
    )
    for note in plan.notes:
        log(note)
    return plan


def settle_collector(on: bool) -> None:
    """The long-lived objects are built: freeze them and collect again (``host/gc_pause.py``), when the run paused the
    collector (``RunDecisions.gc_pause``; a GPU run never imports ``tunekit.host``)."""
    if on:
        from ..host import gc_pause

        gc_pause.settle()


def prepare_data(cfg: Config, settle_gc: bool = False) -> Prepared:
    """Trackers, TrainingArguments, tokenizer, datasets (tokenized once, cached). ``settle_gc``: the run paused the
    collector (``RunDecisions.gc_pause``), settled once the imports are done."""
    report_to = check_trackers(cfg)
    stage = get_stage(cfg.stage)
    quiet_library_notices(cfg)

    import transformers

    transformers.logging.set_verbosity_warning()
    transformers.set_seed(cfg.seed)
    # save_total_limit is applied by CompleteCheckpointCallback after the new checkpoint is marked complete
    args = build_training_arguments(cfg, report_to, save_total_limit=None)
    distributed.before_model_load(cfg)

    tokenizer = load_tokenizer(cfg)
    settle_collector(settle_gc)  # imports are done; preprocessing may allocate in proportion to the data
    with args.main_process_first(desc="dataset preprocessing"):
        data = prepare_datasets(cfg, tokenizer, cfg.stage)
    if is_main_process():
        print_reports(data.reports, cfg.cutoff_len)
    check_media_on_every_rank(cfg, data)  # ZeRO-3 / FSDP2 with a VLM: no micro-batch without media
    if data.template is not None and cfg.template != "jinja":
        jinja = data.template.chat_template_jinja()
        if jinja:
            tokenizer.chat_template = jinja  # saved with the tokenizer: inference renders what training rendered
    return Prepared(args=args, tokenizer=tokenizer, data=data, report_to=report_to, stage=stage)


def build_model(cfg: Config, decisions, prepared: Prepared):
    """The model with its fine-tuning method, as ``decisions`` (RunDecisions) say: ``elementwise_recompute``'s
    hooks."""
    import transformers

    from ..model.elementwise_recompute import enable_for_training

    # the random init (adapters, value head) from the seed alone, not from what data preparation drew: the ranks of a
    # ZeRO-3 run reached this point with different RNG states, and ZeRO-3 keeps each rank's own shard of the init
    transformers.set_seed(cfg.seed)
    tokenizer, data = prepared.tokenizer, prepared.data
    with distributed.saying(f"loading the model {cfg.model_name_or_path}"):  # a long load says so every minute
        own = _REGISTRY[cfg.stage].own_model
        model = (
            prepared.stage.load_model(cfg, tokenizer) if own else load_model(cfg, tokenizer, is_trainable=cfg.do_train)
        )
    if cfg.do_train:  # recipes, not the MLP's element-wise outputs and the norm outputs
        enable_for_training(model, tuple(decisions.elementwise_recompute.detail))
    if cfg.do_train and cfg.cp_size > 1:  # each sequence split over cp_size processes
        from .engines import ulysses  # imports torch: not at module level (preflight imports this module)

        seq = ulysses.apply(model, cfg.cp_size)
        log(f"context parallelism: each sequence split over {seq.size} processes (Ulysses, {cfg.cp_mode})")
    trainable, total = count_parameters(model)
    log(
        f"model: {cfg.model_name_or_path} | method: {cfg.finetuning_type} | "
        f"trainable params: {trainable:,} / {total:,} ({100 * trainable / max(total, 1):.4f}%) | "
        f"train samples: {len(data.train) if data.train is not None else 0}"
        f" | eval samples: {len(data.eval) if data.eval is not None else 0}"
    )
    for line in moe_start_lines(model, cfg):  # a mixture of experts: what trains, the router, its loss
        log(line)
    return model


def build_trainer(cfg: Config, decisions, prepared: Prepared, model) -> BuiltRun:
    """The stage's trainer, built under ``decisions`` (the features it attaches read them: chunked head, trained-token
    loss, heap guard, grouping), with tunekit's callbacks."""
    import transformers

    callbacks, stopper = run_callbacks(cfg)
    with building_with(decisions):
        trainer = prepared.stage.build_trainer(
            cfg, prepared.args, model, prepared.tokenizer, prepared.data, callbacks + tracker_callbacks(cfg)
        )
    for cb in (transformers.trainer_callback.PrinterCallback, transformers.trainer_callback.ProgressCallback):
        trainer.remove_callback(cb)
    settle_collector(
        decisions.gc_pause.on
    )  # the model and trainer are long-lived too: the Trainer's gc.collect() skips them
    return BuiltRun(
        trainer=trainer,
        tokenizer=prepared.tokenizer,
        data=prepared.data,
        stopper=stopper,
        cfg=cfg,
        decisions=decisions,
    )


def execute(cfg: Config, built: BuiltRun, plan) -> dict:
    """Write the run's files, train and save (``do_train``), evaluate (``do_eval`` or an eval strategy): the
    metrics."""
    write_run_files(cfg, plan, built.data, built.decisions)
    results: dict = {}
    if cfg.do_train:
        results.update(train_and_save(cfg, built, plan))
    trainer, data = built.trainer, built.data
    if (
        cfg.do_eval or cfg.eval_strategy != "no"
    ) and data.eval is not None:  # HF's rule: evaluating during training implies a final eval
        metrics = evaluation_of_final_weights(trainer, cfg) or trainer.evaluate(metric_key_prefix="eval")
        if trainer.is_world_process_zero():
            trainer.save_metrics("eval", metrics)
        results.update(metrics)
    return results


def report_done(cfg: Config, results: dict) -> None:
    if cfg.do_train:
        log(
            f"done: {cfg.output_dir} (train_loss {results.get('train_loss', float('nan')):.4f}, "
            f"{results.get('train_runtime', 0):.1f} s, {results.get('train_tokens_per_second') or 0:.0f} tokens/s)"
        )


def run_callbacks(cfg: Config) -> tuple[list, Any]:
    """tunekit's callbacks (jsonl log, complete checkpoints, graceful stop, finite guard, progress) and the stopper."""
    from .callbacks import CompleteCheckpointCallback, GracefulStopCallback, JsonlLogCallback, RichProgressCallback
    from .finite_guard import FiniteGuardCallback

    stopper = GracefulStopCallback()
    callbacks = [JsonlLogCallback(cfg.output_dir), CompleteCheckpointCallback(cfg.save_total_limit), stopper]
    callbacks.append(FiniteGuardCallback(cfg.output_dir))  # after the stopper: it sees every should_save of the step
    if not cfg.disable_tqdm:
        callbacks.append(RichProgressCallback())
    return callbacks, stopper


def write_run_files(cfg: Config, plan, data, decisions=None) -> None:
    """The inputs are validated: now the run's files may replace what output_dir holds (main process)."""
    if not is_main_process():
        return

    if plan.clear:
        log(plan.clear_note)
        apply_clear(plan.clear)
    purge_trash(cfg.output_dir)
    # the options set for this run first, then the rest, grouped (config/loader.py); an option the engine's config
    # replaced (a DeepSpeed optimizer/scheduler block) gets a note saying what ran instead
    notes = distributed.option_notes(cfg)
    if decisions is not None and decisions.precision is not None:  # what ran and why (train/precision.py)
        notes = {**precision_notes(decisions.precision), **notes}
    if decisions is not None:  # an option the device's decision overrode (elementwise_recompute on a GPU)
        notes = {**decisions.option_notes(), **notes}
    save_config(cfg, cfg.output_dir, notes=notes)
    write_reports(data.reports, Path(cfg.output_dir) / "preprocessing_report.json")


def train_and_save(cfg: Config, built: BuiltRun, plan) -> dict:
    """Train (resuming ``plan.checkpoint``), save the model, state, metrics and plots; the train metrics."""
    trainer, stopper, resume = built.trainer, built.stopper, plan.checkpoint
    if resume:
        log(f"resuming from {Path(resume).name} at step {plan.step}")
    stopper.install()
    try:
        train_result = trainer.train(resume_from_checkpoint=resume)
    except Exception as exc:
        _raise_if_disk_full(exc, trainer, cfg)
        raise
    finally:
        stopper.uninstall()
    metrics = dict(train_result.metrics)
    runtime = metrics.get("train_runtime") or 0.0
    tokens = trainer.state.num_input_tokens_seen or 0
    metrics.update(
        num_input_tokens_seen=tokens,
        train_tokens_per_second=round(tokens / runtime, 2) if runtime else None,
        total_steps=trainer.state.global_step,
        **peak_memory_mb(),
    )
    metrics["stopped_early"] = stopper.requested is not None  # all_results.json merges: always say which
    if stopper.requested is not None:
        log(
            f"stopped at step {trainer.state.global_step}: the last checkpoint is in {cfg.output_dir}; "
            f"continue with resume_from_checkpoint: true"
        )
    else:
        save_final_model(cfg, trainer)
    trainer.save_state()
    if trainer.is_world_process_zero():
        trainer.save_metrics("train", metrics)
    if cfg.plot_loss and trainer.is_world_process_zero():
        plots = plot_loss(cfg.output_dir)
        for path in plots:
            log(f"loss plot: {path}")
        if not plots:  # plot_loss asked for, nothing to draw: say so (logging_steps longer than the run)
            log(
                f"plot_loss: no loss was logged, so no plot was written (logging_steps {cfg.logging_steps} against "
                f"{trainer.state.global_step} steps): lower logging_steps to see the curve."
            )
    if stopper.requested is not None:
        sys.exit(128 + int(stopper.requested))
    return metrics


def save_final_model(cfg: Config, trainer) -> None:
    try:
        trainer.save_model()
        if cfg.pissa_convert and trainer.is_world_process_zero():  # output_dir: plain LoRA on the original base
            save_pissa_converted(trainer.model, cfg.output_dir)
            log(
                f"pissa_convert: {cfg.output_dir} holds the adapter as plain LoRA (rank {2 * cfg.lora_rank}) "
                "for the original base"
            )
    except Exception as exc:
        _raise_if_disk_full(exc, trainer, cfg, final=True)
        raise
