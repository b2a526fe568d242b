"""Multi-process and multi-node training engines."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pydantic import Field

from ..problems import Problem
from .base import OptionGroup

if TYPE_CHECKING:  # annotations only: the schema combines this group
    from ..schema import Config


class DistributedOptions(OptionGroup):
    GROUP = "distributed"
    TITLE = "Distributed"

    deepspeed: str | None = Field(
        None, description="DeepSpeed config JSON path, or a preset: z0, z2, z2_offload, z3, z3_offload."
    )
    fsdp: str | None = Field(
        None,
        description="FSDP2 sharding: full_shard, shard_grad_op or no_shard; add ' offload' to offload "
        "parameters to the CPU.",
    )
    fsdp_config: str | None = Field(None, description="FSDP config JSON path (advanced).")
    ddp_find_unused_parameters: bool | None = Field(
        None, description="DDP: search for parameters without gradients (slower; needed by some models)."
    )
    ddp_backend: str | None = Field(
        None, description="torch.distributed backend (nccl on GPUs, gloo on CPU by default)."
    )


def fsdp_config_problems(cfg: Config) -> Iterator[Problem]:
    """``fsdp_config`` without ``fsdp``."""
    if cfg.fsdp_config and not cfg.fsdp:  # read only under fsdp: alone it would be ignored
        yield Problem(
            "fsdp_config is read only when FSDP runs: set fsdp (e.g. fsdp: full_shard) or remove fsdp_config.",
            ("fsdp_config", "fsdp"),
        )
