"""The training stages, declared once: name → data processor, trainer module and capabilities.

Everything else reads this table: the ``stage`` option's accepted values (``config/options/method.py``), the
schema's packing rule, the FSDP rule (``config/engines.py``), the data processors (``data/processors``) and the
trainer modules ``train/run.py`` imports. A stage's trainer module follows :class:`StageModule`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only: the schema reads this registry
    from .schema import Config


@dataclass(frozen=True)
class Stage:
    name: str
    summary: str
    processor: str  # module under tunekit.data.processors: token ids, labels, bookkeeping columns
    trainer: str  # module path of the stage's trainer (a StageModule)
    packing: bool = False  # packing: true is supported
    padding_free: bool = False  # padding_free: true is supported (docs/padding-free.md)
    fsdp: bool = True  # FSDP2 can shard its models
    generation: bool = False  # generates while training
    own_model: bool = False  # the trainer module loads the model itself (StageModule.load_model)
    predict: bool = False  # do_predict generates and scores (LLaMA-Factory's predict)


class StageModule(Protocol):
    """What ``train/run.py`` calls on a stage's trainer module (``load_model`` only when ``Stage.own_model``)."""

    def build_trainer(self, cfg: Config, args: Any, model: Any, tokenizer: Any, data: Any, callbacks: list) -> Any: ...

    def load_model(self, cfg: Config, tokenizer: Any) -> Any: ...


_ALL = (
    Stage("pt", "pretrain", "pt", "tunekit.train.stages.pt", packing=True, padding_free=True),
    Stage(
        "sft",
        "supervised fine-tuning",
        "sft",
        "tunekit.train.stages.sft",
        packing=True,
        padding_free=True,
        predict=True,
    ),
    Stage(
        "rm",
        "reward model",
        "pairwise",
        "tunekit.train.stages.rm",
        fsdp=False,
        own_model=True,
        padding_free=True,
    ),
    Stage(
        "ppo",
        "PPO",
        "prompt",
        "tunekit.train.stages.ppo",
        fsdp=False,
        generation=True,
        own_model=True,
    ),
    Stage("dpo", "DPO", "pairwise", "tunekit.train.stages.dpo", padding_free=True),
    Stage("kto", "KTO", "kto", "tunekit.train.stages.kto", padding_free=True),
    Stage("grpo", "GRPO", "prompt", "tunekit.train.stages.grpo", fsdp=False, generation=True),
)
STAGES: dict[str, Stage] = {s.name: s for s in _ALL}
STAGE_NAMES: tuple[str, ...] = tuple(STAGES)


def stages_with(capability: str) -> tuple[str, ...]:
    return tuple(name for name, stage in STAGES.items() if getattr(stage, capability))


def spoken_list(names) -> str:
    """``a, b and c``."""
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
