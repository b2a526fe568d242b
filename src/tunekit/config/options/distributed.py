"""Multi-process and multi-node training engines."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from ..engines import fsdp_words
from ..problems import Problem, problem
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
    fsdp_transformer_layer_cls_to_wrap: str | None = Field(
        None,
        description="With fsdp: the module class(es) sharded as their own FSDP unit, comma-separated (e.g. "
        "LlamaDecoderLayer); each must exist in the loaded model. Empty: the model's own decoder layer classes "
        "(_no_split_modules).",
    )
    ddp_find_unused_parameters: bool | None = Field(
        None, description="DDP: search for parameters without gradients (slower; needed by some models)."
    )
    ddp_backend: str | None = Field(
        None, description="torch.distributed backend (nccl on GPUs, gloo on CPU by default)."
    )

    @field_validator("fsdp", mode="before")
    @classmethod
    def _fsdp_words_list(cls, value):
        """Hugging Face's list form (``fsdp: [full_shard, auto_wrap]``, as LLaMA-Factory's examples write it)."""
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return " ".join(value)
        return value


def fsdp_config_problems(cfg: Config) -> Iterator[Problem]:
    """``fsdp_config`` without ``fsdp``."""
    if cfg.fsdp_config and not cfg.fsdp:  # read only under fsdp: alone it would be ignored
        yield problem("fsdp_config_alone", ("fsdp_config", "fsdp"))


def fsdp_wrap_problems(cfg: Config) -> Iterator[Problem]:
    """``fsdp_transformer_layer_cls_to_wrap`` (Hugging Face's and LLaMA-Factory's name) only where FSDP shards."""
    if not cfg.fsdp_transformer_layer_cls_to_wrap:
        return
    if not cfg.fsdp or "no_shard" in fsdp_words(cfg.fsdp):  # no FSDP units: DDP or another engine
        yield problem("fsdp_wrap_needs_shard", ("fsdp_transformer_layer_cls_to_wrap", "fsdp"))
