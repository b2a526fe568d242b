"""Multi-process and multi-node training engines."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

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
    # LLaMA-Factory v1's context parallelism (train/engines/ulysses.py)
    cp_size: int = Field(
        1,
        ge=1,
        description="Context parallelism: each sequence split over this many processes (its positions cut in equal "
        "parts), so one process holds 1/cp_size of a sequence's activations; the world size must be a multiple. "
        "Global batch = per-device batch x accumulation x processes / cp_size. 1: off.",
    )
    cp_mode: Literal["ulysses"] = Field(
        "ulysses",
        description="With cp_size > 1, how attention sees the whole sequence: ulysses (an all-to-all exchange gives "
        "each process 1/cp_size of the attention heads over all positions; the heads must divide by cp_size).",
    )
    # LLaMA-Factory's RayArguments: read with USE_RAY=1 in the environment (train/engines/ray_launch.py)
    ray_num_workers: int = Field(
        1, ge=1, description="USE_RAY=1: the training processes Ray Train starts (the world size), one per GPU."
    )
    resources_per_worker: dict[str, float] | None = Field(
        None,
        description='USE_RAY=1: the Ray resources of each worker, e.g. {"GPU": 1, "CPU": 8}. Empty: 1 GPU each '
        "when the Ray cluster has GPUs (LLaMA-Factory's default), else 1 CPU.",
    )
    placement_strategy: Literal["SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK"] = Field(
        "PACK", description="USE_RAY=1: how Ray places the workers on the cluster's nodes (PACK: as few as possible)."
    )
    ray_run_name: str | None = Field(
        None, description="USE_RAY=1: the run's name; Ray keeps its records in ray_storage_path/ray_run_name."
    )
    ray_storage_path: str = Field(
        "./saves",
        description="USE_RAY=1: where Ray keeps its run records (tunekit's checkpoints, logs and model go to "
        "output_dir, as without Ray).",
    )
    ray_init_kwargs: dict[str, Any] | None = Field(
        None,
        description="USE_RAY=1: arguments of ray.init, e.g. {address: auto} to join a running cluster, or "
        "runtime_env with env_vars. Empty: ray.init() (the cluster in RAY_ADDRESS, else a local one).",
    )

    @field_validator("fsdp", mode="before")
    @classmethod
    def _fsdp_words_list(cls, value):
        """Hugging Face's list form (``fsdp: [full_shard, auto_wrap]``, as LLaMA-Factory's examples write it)."""
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return " ".join(value)
        return value

    @field_validator("resources_per_worker", "ray_init_kwargs", mode="before")
    @classmethod
    def _json_object(cls, value):
        """LLaMA-Factory's command-line form: a JSON object in a string (``resources_per_worker='{"GPU": 1}'``)."""
        if isinstance(value, str) and value.strip().startswith("{"):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON object: {exc}") from None
        return value


def ray_problems(cfg: Config) -> Iterator[Problem]:
    """What tunekit's Ray launch cannot do, by name (train/engines/ray_launch.py)."""
    if cfg.use_cpu and (cfg.resources_per_worker or {}).get("GPU"):
        yield problem("ray_gpu_with_use_cpu", ("resources_per_worker", "use_cpu"))


def context_parallel_problems(cfg: Config) -> Iterator[Problem]:
    """What ``cp_size`` > 1 (Ulysses, train/engines/ulysses.py) cannot run with, by name."""
    cp = cfg.cp_size
    if cp == 1:
        return
    if cfg.stage not in ("sft", "pt"):
        yield problem("cp_stage", ("cp_size", "stage"), cp=cp, stage=cfg.stage)
    if cfg.deepspeed:
        yield problem("cp_deepspeed", ("cp_size", "deepspeed"), cp=cp)
    if cfg.flash_attn in ("disabled", "eager"):
        yield problem("cp_eager", ("cp_size", "flash_attn"), cp=cp, value=cfg.flash_attn)
    if cfg.finetuning_type in ("ptuning", "prompt"):  # virtual tokens before the sequence or in every layer's keys
        yield problem(
            "cp_changes_attention",
            ("cp_size", "finetuning_type"),
            cp=cp,
            option=f"finetuning_type: {cfg.finetuning_type}",
        )
    if cfg.use_unsloth:  # Unsloth's own attention code, not transformers' interface
        yield problem("cp_changes_attention", ("cp_size", "use_unsloth"), cp=cp, option="use_unsloth")
    for option in ("use_asft_loss", "neftune_noise_alpha"):  # each reads a whole sequence in one process
        if getattr(cfg, option):
            yield problem("cp_whole_sequence", ("cp_size", option), cp=cp, option=option)
    # what changes what a row holds or which rows go together
    rows = [o for o in ("neat_packing", "padding_free", "max_tokens_per_batch", "group_by_length") if getattr(cfg, o)]
    for option in rows + (["thought_loss_weight"] if cfg.thought_loss_weight != 1 else []):
        yield problem("cp_batching", ("cp_size", option), cp=cp, option=option)


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
