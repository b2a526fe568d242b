"""Option groups; :class:`tunekit.config.schema.Config` combines them."""

from .data import DataOptions
from .distributed import DistributedOptions
from .export import ExportOptions
from .infer import InferOptions
from .logging import LoggingOptions
from .method import FREEZE_ONLY, LORA_ONLY, MethodOptions
from .model import ModelOptions
from .multimodal import MultimodalOptions
from .optimizers import OFT_ONLY, SWITCHED, OptimizerOptions
from .rlhf import RLHFOptions
from .training import TrainingOptions

# Display order (CLI help, web board, docs).
GROUPS = (
    ModelOptions, DataOptions, MethodOptions, TrainingOptions, RLHFOptions,
    OptimizerOptions, DistributedOptions, LoggingOptions, ExportOptions, InferOptions, MultimodalOptions,
)

__all__ = ["GROUPS", "LORA_ONLY", "FREEZE_ONLY", "OFT_ONLY", "SWITCHED"] + [g.__name__ for g in GROUPS]
