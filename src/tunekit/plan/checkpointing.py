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


def gpu_budget_text(gpu) -> str:
    return f"{GPU_SHARE:.0%} of the {gpu.name}'s {gpu.memory_gib:.0f} GiB"


def cpu_budget_bytes(local_processes: int) -> float:
    pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return pages * page * CPU_SHARE / max(1, local_processes)


def resolve_gradient_checkpointing(cfg, gpu=None, world_size: int | None = None, on_gpu: bool | None = None):
    """Return ``cfg`` with ``gradient_checkpointing`` decided (True/False) when it is ``auto``, and the decision.

    ``gpu`` (a :class:`~tunekit.plan.gpus.GPU`) defaults to the first visible CUDA device; without one the
    budget is the host's RAM.
    """
    if cfg.gradient_checkpointing != "auto" or cfg.disable_gradient_checkpointing:
        return cfg, None
    decision = _decision(cfg, gpu, world_size, on_gpu)
    from ..config import build_config

    values = {k: getattr(cfg, k) for k in cfg.model_fields_set}
    values["gradient_checkpointing"] = decision.enabled
    return build_config(values), decision


def _decision(cfg, gpu, world_size, on_gpu) -> CheckpointingDecision:
    from ..errors import TunekitError
    from .architectures import load_shape
    from .core import detect_gpu
    from .memory import estimate_memory
    from .setup import resolve_setup

    if gpu is None and on_gpu is not False and not cfg.use_cpu:
        gpu = detect_gpu()
    world = world_size or int(os.environ.get("WORLD_SIZE", "0") or 0) or 1
    nodes = int(os.environ.get("NNODES", "1") or 1)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0) or max(1, world // max(1, nodes))
    try:
        shape = load_shape(None, cfg.model_name_or_path)
        setup = replace(resolve_setup(cfg, world, nodes), grad_ckpt=False)
        peak = estimate_memory(shape, setup).total
    except (TunekitError, OSError, ValueError, KeyError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return CheckpointingDecision(True, None, None, "", f"the memory plan could not be made ({first}), so it stays on")
    if gpu is not None:
        return decide(peak, gpu.memory_gib * GiB * GPU_SHARE, gpu_budget_text(gpu))
    budget = cpu_budget_bytes(local)
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / GiB
    share = f"{CPU_SHARE:.0%} of {ram:.0f} GiB RAM" + (f" / {local} processes" if local > 1 else "")
    return decide(peak, budget, share)
