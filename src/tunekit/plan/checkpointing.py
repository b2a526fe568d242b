"""``gradient_checkpointing: auto`` (the default): recompute activations only when memory needs it.

Checkpointing trades compute for memory: every decoder layer runs its forward twice, which costs
about a quarter of the step time, and buys nothing when the activations fit anyway (small models, short
cutoffs, big devices). So the default asks the memory model (:mod:`tunekit.plan.memory`) for the peak of
this very run *without* checkpointing, at the worst case the data can produce (every micro-batch padded
to ``cutoff_len``), and turns checkpointing off only when that peak leaves a wide margin:

- on a GPU: at most :data:`GPU_SHARE` of the device's memory (the planner's own fit rule keeps 5 % free;
  this is stricter, so a run that would only just fit keeps checkpointing);
- on a CPU: at most :data:`CPU_SHARE` of the machine's RAM divided by the processes on this node (the
  host also holds the data, the Python heap and the other ranks).

Everything else (a model the planner cannot read, no model path yet, an error while planning) keeps
checkpointing on: the safe choice. ``gradient_checkpointing: true/false`` (or LLaMA-Factory's
``disable_gradient_checkpointing: true``) skip the decision. The decision is a pure function of the
config, the model's config.json and the device model, so every rank of a job takes the same one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from .memory import GiB

GPU_SHARE = 0.80
CPU_SHARE = 0.50


@dataclass(frozen=True)
class CheckpointingDecision:
    enabled: bool
    peak_without_bytes: float | None  # planned peak per device without checkpointing (None: not planned)
    budget_bytes: float | None
    device: str  # what the budget is: "80% of the H100-SXM's 80 GiB" / "50% of 24 GiB RAM / 2 processes"
    reason: str

    def message(self) -> str:
        state = "on" if self.enabled else "off"
        return f"gradient checkpointing: {state} (auto: {self.reason})"


def decide(peak_without: float, budget: float, device: str) -> CheckpointingDecision:
    """Off when the run's planned peak without checkpointing stays within ``budget`` bytes."""
    need, have = peak_without / GiB, budget / GiB
    if peak_without <= budget:
        return CheckpointingDecision(False, peak_without, budget, device,
                                     f"without it this run needs {need:.2f} GiB per device, within {have:.1f} GiB "
                                     f"({device}); set gradient_checkpointing: true to force it")
    return CheckpointingDecision(True, peak_without, budget, device,
                                 f"without it this run would need {need:.2f} GiB per device, over {have:.1f} GiB "
                                 f"({device})")


def decide_for(shape, setup, gpu=None, local_processes: int = 1) -> CheckpointingDecision:
    """The decision for ``setup`` (its own ``grad_ckpt`` is ignored) on ``gpu``, or on this host's RAM without one."""
    from .memory import estimate_memory

    peak = estimate_memory(shape, replace(setup, grad_ckpt=False)).total
    if gpu is not None:
        return decide(peak, gpu.memory_gib * GiB * GPU_SHARE, f"{GPU_SHARE:.0%} of the {gpu.name}'s {gpu.memory_gib:.0f} GiB")
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    where = f"{CPU_SHARE:.0%} of {ram / GiB:.0f} GiB RAM" + (f" / {local_processes} processes" if local_processes > 1 else "")
    return decide(peak, ram * CPU_SHARE / max(1, local_processes), where)


def resolve_gradient_checkpointing(cfg, gpu=None, world_size: int | None = None):
    """Return ``cfg`` with ``gradient_checkpointing`` decided (True/False) when it is ``auto``, and the decision.

    ``gpu`` (a :class:`~tunekit.plan.gpus.GPU`) defaults to the first visible CUDA device; without one the
    budget is the host's RAM.
    """
    if cfg.gradient_checkpointing != "auto" or cfg.disable_gradient_checkpointing:
        return cfg, None
    decision = _decision(cfg, gpu, world_size)
    from ..config import build_config

    values = {k: getattr(cfg, k) for k in cfg.model_fields_set}
    values["gradient_checkpointing"] = decision.enabled
    return build_config(values), decision


def _decision(cfg, gpu, world_size) -> CheckpointingDecision:
    from ..errors import TunekitError
    from ..env import env_world_size
    from .architectures import load_shape
    from .gpus import detect_gpu
    from .training_setup import resolve_setup

    if gpu is None and not cfg.use_cpu:
        gpu = detect_gpu()
    world = world_size or env_world_size() or 1
    nodes = int(os.environ.get("NNODES", "1") or 1)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0) or max(1, world // max(1, nodes))
    try:
        return decide_for(load_shape(None, cfg.model_name_or_path), resolve_setup(cfg, world, nodes), gpu, local)
    except (TunekitError, OSError, ValueError, KeyError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return CheckpointingDecision(True, None, None, "", f"the memory plan could not be made ({first}), so it stays on")
