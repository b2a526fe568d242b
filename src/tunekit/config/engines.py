"""The distributed engines' words, declared once: DeepSpeed presets, the ``fsdp`` words and the rules that need
no environment. The schema (``config/schema.py``) refuses what these rules refuse, so the board's validation, which
builds the config, refuses what training refuses; the launcher (``train/engines/distributed.py``) and the planner
(``plan/training_setup.py``) read the same words through :func:`fsdp_strategy` and ``train.distributed.engine_plan``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .problems import Problem, Said
from .stages import STAGES, stages_with

if TYPE_CHECKING:  # annotations only: the schema runs these rules
    from .schema import Config

DEEPSPEED_PRESETS = ("z0", "z1", "z2", "z2_offload", "z3", "z3_offload")  # resources/deepspeed/ds_<name>_config.json
FSDP_STRATEGIES = ("full_shard", "shard_grad_op", "no_shard")
FSDP_WORDS = (*FSDP_STRATEGIES, "offload", "auto_wrap")  # auto_wrap: Hugging Face's spelling, always on here
# Stages whose models FSDP2 cannot shard here (config/stages.py: fsdp=False): a value head saved beside the LM
# (rm, ppo), generation while training (grpo, ppo) with a model whose layers every rank must gather in lockstep.
FSDP_UNSUPPORTED_STAGES = tuple(name for name in STAGES if not STAGES[name].fsdp)


def fsdp_words(value: str | None) -> list[str]:
    return (value or "").replace(",", " ").split()


def _strategy_problem(value: str | None) -> tuple[str | None, str | None]:
    """``(strategy, None)`` or ``(None, message)`` for the ``fsdp`` option."""
    if not value:
        return None, None
    parts = fsdp_words(value)
    unknown = [p for p in parts if p not in FSDP_WORDS]
    if unknown:
        return None, Said("fsdp_unknown_words", value=repr(value), words=tuple(unknown), strategies=FSDP_STRATEGIES)
    strategies = [p for p in parts if p in FSDP_STRATEGIES]
    if len(strategies) != 1:
        return None, Said("fsdp_one_strategy", value=repr(value), strategies=FSDP_STRATEGIES)
    return strategies[0], None


def fsdp_strategy(value: str | None) -> str | None:
    """The one strategy the ``fsdp`` option names (None without it); a ConfigError for any other word."""
    strategy, problem = _strategy_problem(value)
    if problem:
        raise ConfigError(problem)
    return strategy


def engine_problems(cfg: Config) -> Iterator[Problem]:
    """The engine rules that need no environment (the schema yields them; ``train.distributed`` relies on them)."""
    strategy, problem = _strategy_problem(cfg.fsdp)
    if problem:
        yield Problem(problem, ("fsdp",))
        return
    if strategy in (None, "no_shard"):  # no_shard is DDP: no restriction
        return
    if cfg.stage in FSDP_UNSUPPORTED_STAGES:
        says = Said("fsdp_stage", fsdp=cfg.fsdp, stage=cfg.stage, stages=tuple(stages_with("fsdp")))
        yield Problem(says, ("fsdp", "stage"))
    if cfg.fp16:
        yield Problem(Said("fsdp_fp16"), ("fsdp", "fp16"))
    if cfg.do_predict:
        yield Problem(Said("fsdp_predict"), ("do_predict", "fsdp"))
