"""Decide the run: the one step ``tunekit train`` (``tunekit/flow.py``) and ``tunekit plan`` take before a model loads.

:func:`decide_run` settles ``gradient_checkpointing: auto`` from the memory plan (``plan/checkpointing.py``, at the
tokenized rows' longest when the data is at hand) and then fills :class:`~tunekit.train.decisions.RunDecisions` with
:func:`~tunekit.train.decisions.decide_features` for the same config and machine. The trainer reads its features from
that value; the planner's memory terms from the same value (``training_setup.resolve_setup(decisions=...)``).
"""

from __future__ import annotations

from ..config.schema import Config
from ..train.decisions import RunDecisions, decide_features
from ..train.decisions.features import checkpointing_is_auto
from ..train.machine import Machine
from .checkpointing import resolve_gradient_checkpointing


def decide_run(
    cfg: Config, machine: Machine, longest_row: int | None = None, gpu=None, precision=None
) -> RunDecisions:
    """The run's decisions for ``cfg`` on ``machine``; ``longest_row``: the longest tokenized training row (None:
    ``cutoff_len``); ``gpu``: the planner's GPU model for the checkpointing budget (None: the visible one, or the
    host's RAM on a CPU machine); ``precision``: the decision already applied to ``cfg`` (``train/precision.py``).
    The decided config is ``.cfg``."""
    note = None
    if cfg.do_train and checkpointing_is_auto(cfg):
        cfg, decision = resolve_gradient_checkpointing(
            cfg, gpu=gpu, world_size=machine.processes, longest_row=longest_row, machine=machine
        )
        note = str(decision.message()) if decision is not None else None
    return decide_features(cfg, machine, checkpointing_note=note, precision=precision)
