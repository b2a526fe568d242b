"""The run's decisions, made once: :class:`RunDecisions` (precision, engine, attention, every memory and speed
feature, checkpointing, batching) for a config and the device it trains on (:class:`~tunekit.train.machine.Machine`).

:func:`decide_features` is the one function that fills it; ``plan/decide.py`` (``decide_run``) adds what needs the
memory model (``gradient_checkpointing: auto`` at the data's longest row) and is what ``tunekit train`` (through
``tunekit/flow.py``) and ``tunekit plan`` call. The trainer reads its features from the value the flow passes
(``train/run.py``), the planner from the one its plan carries (``plan/training_setup.resolve_setup``).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from typing import Any

from ...config.method_rules import checkpointing_auto_off
from ...config.schema import Config
from ..engines.distributed import engine_plan
from ..machine import Machine, run_machine
from ..precision import PrecisionDecision, decide_precision
from . import cpu_host
from . import features as f
from .features import Decision, Feature

FEATURES: tuple[Feature, ...] = (
    Feature(
        "chunked_lm_head",
        f.chunked_lm_head,
        "plan/activations.py chunked_head (Setup.chunked_loss)",
        "train/token_loss.py _chunked_head_loss; stages/reference_policy.forward_logps(chunked=...)",
    ),
    Feature(
        "trained_tokens_loss",
        f.trained_tokens_loss,
        "not modelled (the plain path's peak is the bound)",
        "train/token_loss.py _trained_tokens_head",
    ),
    Feature("liger", f.liger, "plan/activations.py (Setup.liger: kernels)", "train/arguments.py use_liger_kernel"),
    Feature(
        "liger_fused_loss",
        f.liger_fused_loss,
        "plan/activations.py head terms (Setup.liger_loss)",
        "the model's forward, patched by Liger (HF Trainer)",
    ),
    Feature(
        "elementwise_recompute",
        f.elementwise_recompute,
        "plan/activations.py recomputed_parts (Setup.recompute)",
        "train/run.py build_model -> model/elementwise_recompute.enable",
    ),
    Feature(
        "gradient_checkpointing",
        f.gradient_checkpointing,
        "plan/activations.py checkpointed_layers (Setup.grad_ckpt, ckpt_layers)",
        "model/loader.py (the resolved config)",
    ),
    Feature(
        "padding_free", f.padding_free, "plan/training_setup.py Setup.padding_free", "data/padding_free.py collator"
    ),
    Feature("token_budget", f.token_budget, "plan/training_setup.py Setup.token_budget", "train/token_budget.py"),
    Feature(
        "group_within_step",
        f.group_within_step,
        "none (same samples, less padding)",
        "train/window_grouping.py WindowGroupingMixin",
    ),
    Feature("fused_optimizer", f.fused_optimizer, "none (the same states)", "HF Trainer (optim)"),
    Feature(
        "heap_guard",
        cpu_host.heap_guard,
        "plan/memory.py fragmentation_bytes (Setup.heap_guard)",
        "train/run.py build_trainer -> host/heap.attach",
    ),
    Feature(
        "malloc_tune",
        cpu_host.malloc_tune,
        "none (reuse, measured -2..+4 % RSS)",
        "tunekit/flow.py start_host -> host/malloc.tune",
    ),
    Feature("gc_pause", cpu_host.gc_pause, "none", "tunekit/flow.py start_host -> host/gc_pause.pause/settle"),
)
HOST_FEATURES = ("heap_guard", "malloc_tune", "gc_pause")  # tunekit.host's: never on for a GPU run by default
# flash_attn -> the attention the model runs; None (auto): transformers' default for the model (model/loader.py passes
# none), sdpa where the architecture has it, else eager: the planner reads it off the model (ModelShape.default_attn)
ATTENTION = {"auto": None, "sdpa": "sdpa", "disabled": "eager", "eager": "eager", "fa2": "fa2"}


@dataclass(frozen=True)
class RunDecisions:
    """Everything a run decided before its model loads; equal for equal (config, machine)."""

    machine: Machine
    engine: str  # single, ddp, deepspeed zN, fsdp zN (train.engines.distributed.engine_plan)
    attention: str | None  # sdpa | eager | fa2; None: the model's default (plan: ModelShape.default_attn)
    precision: PrecisionDecision  # train/precision.py
    chunked_lm_head: Decision
    trained_tokens_loss: Decision
    liger: Decision
    liger_fused_loss: Decision
    elementwise_recompute: Decision
    gradient_checkpointing: Decision
    padding_free: Decision
    token_budget: Decision
    group_within_step: Decision
    fused_optimizer: Decision
    heap_guard: Decision
    malloc_tune: Decision
    gc_pause: Decision
    checkpointing_note: str | None = None  # gradient_checkpointing: auto, as decided (plan/checkpointing.py)
    cfg: Any = field(default=None, compare=False, repr=False)  # the config decided (auto settled)

    def features(self) -> dict[str, Decision]:
        return {feature.name: getattr(self, feature.name) for feature in FEATURES}

    def option_notes(self) -> dict[str, str]:
        """``{option: comment}`` for ``tunekit_config.yaml``: an option whose value did not run as written, and why."""
        notes = {}
        cfg, recompute = self.cfg, self.elementwise_recompute
        if cfg is not None and cfg.elementwise_recompute and not recompute.on:
            notes["elementwise_recompute"] = f"elementwise_recompute: off for this run ({recompute.why})"
        return notes


def decide_host(cfg: Config, machine: Machine) -> dict[str, Decision]:
    """The CPU-host features alone (what ``tunekit train`` needs before it imports torch)."""
    return {name: next(ft for ft in FEATURES if ft.name == name).decide(cfg, machine) for name in HOST_FEATURES}


def _engine(cfg: Config, machine: Machine) -> str:

    plan = engine_plan(cfg, machine.processes)
    return plan.engine + (f" z{plan.zero_stage}" if plan.zero_stage else "")


def decide_features(
    cfg: Config, machine: Machine, checkpointing_note: str | None = None, precision: PrecisionDecision | None = None
) -> RunDecisions:
    """The one function that decides a run's features for ``cfg`` (``gradient_checkpointing`` already resolved when
    it was ``auto``: ``plan/decide.py``) on ``machine``; ``precision``: the decision the run already applied to
    ``cfg`` (``tunekit/flow.py``), kept with its reason (decided again from the applied options it would read as set
    by them)."""
    values = {feature.name: feature.decide(cfg, machine) for feature in FEATURES}
    if checkpointing_note is None and checkpointing_auto_off(cfg):  # printed as a planned auto decision is
        checkpointing_note = f"gradient checkpointing: off ({values['gradient_checkpointing'].why})"
    return RunDecisions(
        machine=machine,
        engine=_engine(cfg, machine),
        attention=ATTENTION[cfg.flash_attn],
        precision=precision or decide_precision(cfg, machine),
        checkpointing_note=checkpointing_note,
        cfg=cfg,
        **values,
    )


_BUILDING: ContextVar[RunDecisions | None] = ContextVar("run_decisions", default=None)


@contextmanager
def building_with(decisions: RunDecisions):
    """The trainers built inside read ``decisions`` (``train/run.build_trainer``: the stage modules build them)."""
    token = _BUILDING.set(decisions)
    try:
        yield decisions
    finally:
        _BUILDING.reset(token)


def decisions_for(cfg: Config) -> RunDecisions:
    """The decisions a trainer of ``cfg`` reads: those it is built with (:func:`building_with`), else
    :func:`decide_features` for ``cfg`` on the machine the run uses (``train/machine.run_machine``)."""
    current = _BUILDING.get()
    if current is not None:
        return current

    return decide_features(cfg, run_machine(cfg))


assert {x.name for x in fields(RunDecisions)} >= {feature.name for feature in FEATURES}
__all__ = [
    "Decision",
    "Feature",
    "FEATURES",
    "HOST_FEATURES",
    "RunDecisions",
    "building_with",
    "decide_features",
    "decide_host",
    "decisions_for",
]
