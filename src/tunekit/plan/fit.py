"""``--auto-fit``: the fastest set-up that fits, keeping the requested effective batch size.

Preference order (fastest first): no gradient checkpointing, then checkpointing, then Liger's fused
loss, then DeepSpeed ZeRO-2 / ZeRO-3 (several GPUs; not with ``cp_size``), then CPU offload. Within a rung the largest
micro-batch that fits wins (the accumulation steps make up the rest of the effective batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config.schema import Config
from ..train.decisions import decide_features
from ..train.machine import Machine
from .architectures import ModelShape
from .gpus import GPU
from .memory import GiB, MemoryEstimate, estimate_memory
from .notes import Note
from .params import count_params
from .training_setup import DS_PRESETS, Setup, deepspeed_buffers

SAFETY_MARGIN = 0.05  # keep 5 % of the GPU free for unusually long batches and allocator spikes


@dataclass
class FitResult:
    fits: bool
    setup: Setup
    memory: MemoryEstimate
    overrides: dict
    rung: Note  # "DeepSpeed z3 + gradient checkpointing + Liger"; its parts: problem_texts_plan.RUNGS
    missing_gib: float = 0.0
    gpus_needed: int | None = None

    def to_dict(self) -> dict:
        return {
            "fits": self.fits,
            "choice": str(self.rung),
            "overrides": self.overrides,
            "total_gib": round(self.memory.total / GiB, 3),
            "missing_gib": round(self.missing_gib, 2),
            "gpus_needed": self.gpus_needed,
        }


def usable_bytes(gpu: GPU) -> float:
    return gpu.memory_gib * GiB * (1 - SAFETY_MARGIN)


def _divisors_desc(n: int) -> list[int]:
    return sorted({d for i in range(1, int(math.isqrt(n)) + 1) if n % i == 0 for d in (i, n // i)}, reverse=True)


def _ladder(setup: Setup) -> list[tuple[Note, dict]]:
    ckpt = setup.finetuning_type != "ptuning"  # peft refuses prefix tuning on a checkpointed model (method_rules.py)
    gc = (Note("rung_ckpt"),) if ckpt else ()
    rungs: list[tuple[Note, dict]] = [
        (Note("rung_no_ckpt"), {"grad_ckpt": False}),
        *([(Note("rung_ckpt"), {"grad_ckpt": True})] if ckpt else []),
        (Note("rung", parts=(*gc, Note("rung_liger_loss"))), {"grad_ckpt": ckpt, "liger": True}),
    ]
    if setup.fsdp is None and setup.cp_size == 1:  # cp_size runs under DDP or FSDP2 only (config: cp_deepspeed)
        current = setup.zero_stage if setup.zero_stage is not None else -1
        offload = setup.offload_optimizer or setup.offload_params
        for preset in ("z2", "z3", "z2_offload", "z3_offload"):
            stage, off_opt, off_par = DS_PRESETS[preset]
            if setup.world_size == 1 and not off_opt:
                continue  # sharding over one GPU saves nothing
            if stage < current or (stage == current and not off_opt and offload):
                continue
            bucket, overlap, max_live = deepspeed_buffers(preset)
            rungs.append(
                (
                    Note("rung", parts=(f"DeepSpeed {preset}", *gc, "Liger")),
                    {
                        "grad_ckpt": ckpt,
                        "liger": True,
                        "zero_stage": stage,
                        "offload_optimizer": off_opt,
                        "offload_params": off_par,
                        "ds_reduce_bucket": bucket,
                        "ds_overlap_comm": overlap,
                        "ds_max_live": max_live,
                        "_preset": preset,
                    },
                )
            )
    return rungs


def _overrides(cfg: Config, setup: Setup, changes: dict, micro: int, accum: int) -> dict:
    out: dict = {
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": accum,
        "gradient_checkpointing": setup.grad_ckpt,
    }
    if "disable_gradient_checkpointing" in cfg.model_fields_set:
        out["disable_gradient_checkpointing"] = not setup.grad_ckpt
    if setup.liger != cfg.enable_liger_kernel:
        out["enable_liger_kernel"] = setup.liger
    if "_preset" in changes and changes["_preset"] != (cfg.deepspeed or ""):
        out["deepspeed"] = changes["_preset"]
    return out


def auto_fit_overrides(cfg: Config, shape: ModelShape, setup: Setup, gpu: GPU) -> FitResult:
    """Search the ladder; ``overrides`` are the ``key=value`` options to pass to ``tunekit train``."""
    per_device = setup.micro_batch * setup.grad_accum
    limit = usable_bytes(gpu)
    best: tuple[float, Setup, MemoryEstimate, Note, dict] | None = None
    liger = _liger_fields(cfg, setup)
    for rung, changes in _ladder(setup):
        fields = {k: v for k, v in changes.items() if not k.startswith("_")}
        if fields.get("liger"):
            fields.update(liger)
        base = setup.with_(**fields)
        counts = count_params(shape, base)
        for micro in _divisors_desc(per_device):
            trial = base.with_(micro_batch=micro, grad_accum=per_device // micro)
            mem = estimate_memory(shape, trial, counts)
            if mem.total <= limit:
                return FitResult(True, trial, mem, _overrides(cfg, trial, changes, micro, per_device // micro), rung)
            if best is None or mem.total < best[0]:
                best = (mem.total, trial, mem, rung, changes)
    assert best is not None
    total, trial, mem, rung, changes = best
    needed = None
    if setup.fsdp is None and setup.cp_size == 1:  # how many GPUs would ZeRO-3 need?
        z3 = trial.with_(
            zero_stage=3,
            offload_optimizer=False,
            offload_params=False,
            micro_batch=1,
            grad_accum=per_device,
            grad_ckpt=setup.finetuning_type != "ptuning",
            **liger,
        )
        for n in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
            if n <= setup.world_size:
                continue
            t = z3.with_(world_size=n, nodes=max(1, math.ceil(n / max(1, setup.gpus_per_node))))
            if estimate_memory(shape, t).total <= limit:
                needed = n
                break
    overrides = _overrides(cfg, trial, changes, trial.micro_batch, trial.grad_accum)
    return FitResult(False, trial, mem, overrides, rung, missing_gib=(total - limit) / GiB, gpus_needed=needed)


def _liger_fields(cfg: Config, setup: Setup) -> dict:
    """The set-up's fields with ``enable_liger_kernel: true``, as the run's decisions give them (``train/decisions``):
    Liger's fused loss where the stage's loss is the model's, the chunked head and the recompute as they then are."""
    machine = Machine.cpu(setup.world_size) if setup.host else Machine.cuda(setup.world_size)
    d = decide_features(cfg.model_copy(update={"enable_liger_kernel": True}), machine)
    return {
        "liger": True,
        "liger_loss": d.liger_fused_loss.on,
        "chunked_loss": d.chunked_lm_head.on,
        "recompute": tuple(d.elementwise_recompute.detail),
    }
