"""Option groups; :class:`tunekit.config.schema.Config` combines them."""

from .data import DataOptions
from .distributed import DistributedOptions
from .export import ExportOptions
from .facts import option_facts
from .infer import InferOptions
from .logging import LoggingOptions
from .method import MethodOptions
from .model import ModelOptions
from .multimodal import MultimodalOptions
from .optimizers import OptimizerOptions
from .rlhf import RLHFOptions
from .training import TrainingOptions

# Display order (CLI help, web board, docs).
GROUPS = (
    ModelOptions,
    DataOptions,
    MethodOptions,
    TrainingOptions,
    RLHFOptions,
    OptimizerOptions,
    DistributedOptions,
    LoggingOptions,
    ExportOptions,
    InferOptions,
    MultimodalOptions,
)


def options_only_for(method: str) -> tuple[str, ...]:
    """The options declared ``only=method`` (config/options/facts.py), in display order."""
    return tuple(
        name for group in GROUPS for name, info in group.model_fields.items() if option_facts(info).only == method
    )


# Options that only make sense for one finetuning_type (the schema's cross-field rules refuse them with another).
LORA_ONLY = options_only_for("lora")
FREEZE_ONLY = options_only_for("freeze")
OFT_ONLY = options_only_for("oft")


def _switched() -> dict[str, tuple[str, ...]]:
    switched: dict[str, list[str]] = {}
    for group in GROUPS:
        for name, info in group.model_fields.items():
            if (switch := option_facts(info).needs) is not None:
                switched.setdefault(switch, []).append(name)
    return {switch: tuple(names) for switch, names in switched.items()}


# switch → the options that only take effect with it on (declared needs="switch"), for the schema's rule.
SWITCHED = _switched()

__all__ = ["GROUPS", "LORA_ONLY", "FREEZE_ONLY", "OFT_ONLY", "SWITCHED", "options_only_for"] + [
    g.__name__ for g in GROUPS
]
