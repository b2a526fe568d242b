"""``gradient_checkpointing: auto`` (the default): recompute activations only when memory needs it.

Checkpointing trades compute for memory: every decoder layer runs its forward twice, which costs
about a quarter of the step time, and buys nothing when the activations fit anyway (small models, short
cutoffs, big devices). So the default asks the memory model (:mod:`tunekit.plan.memory`) for the peak of
this very run *without* checkpointing, at the largest micro-batch the data can produce, and turns checkpointing
off only when that peak leaves a wide margin. ``tunekit train`` decides once the data is tokenized, so the rows
are the data's own (the longest training row, padded, or a packed row; ``plan/training_setup.py:
memory_seq_len``); without data (``resolve_gradient_checkpointing`` called alone) every row is taken to reach
``cutoff_len``. The budget:

- on a GPU: at most :data:`GPU_SHARE` of the device's memory (the planner's own fit rule keeps 5 % free;
  this is stricter, so a run that would only just fit keeps checkpointing);
- on a CPU: at most :data:`CPU_SHARE` of the machine's RAM divided by the processes on this node (the
  host also holds the data, the Python heap and the other ranks).

When the run does not fit without it, checkpointing is not all-or-nothing: it is turned on for the fewest of the
lowest decoder layers that bring the planned peak within the budget (``gradient_checkpointing_layers``); the layers
above keep their activations and are not recomputed, so the step pays only that share of the recompute. A
checkpointed layer holds only its input (``hidden x tokens`` of the residual stream), the others everything their
backward needs (plan/activations.py counts both), so the planned peak falls linearly with each layer checkpointed.
That holds on a GPU as on a CPU: recompute is FLOPs, and memory left unused buys nothing.

On a CPU one more rule applies when the run fits without checkpointing: the RAM is the whole machine's, so ``auto``
checkpoints the fewest lowest layers that bring the planned peak under what the standard recipe (every layer
checkpointed, whole logits: LLaMA-Factory's and Axolotl's default) would need for this run, when that costs at most
:data:`MAX_SPEED_COST` of the step (:func:`below_standard`); when it would cost more, speed wins and it stays off.

A plan that cannot be made (a model the planner cannot read, no model path yet, an error while planning) is a
ConfigError naming why, never a silent choice: the planner works under every engine (a live ZeRO-3 config included,
``architectures.outside_zero3_init``), and the user settles what it cannot. ``gradient_checkpointing: true/false``
(or LLaMA-Factory's ``disable_gradient_checkpointing: true``) skip the decision, and so does ``finetuning_type:
ptuning``: peft refuses prefix tuning on a checkpointed model, so ``auto`` is off for it from the config alone
(``config/method_rules.checkpointing_auto_off``, the reason in ``train/decisions`` for the run and the planner).
The decision is a pure function of the config, the model's config.json, the device model and the tokenized rows (the
same on every rank), so every rank of a job takes the same one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from ..config import build_config
from ..config.schema import Config
from ..env import env_nodes, env_world_size
from ..errors import ConfigError, TunekitError
from ..train.decisions import decide_features
from ..train.decisions.features import checkpointing_is_auto
from .architectures import training_shape
from .gpus import detect_gpu
from .memory import GiB, estimate_memory
from .notes import Note
from .training_setup import memory_seq_len, planned_machine, resolve_setup
from .vision import assumed_media

GPU_SHARE = 0.80
CPU_SHARE = 0.50
# Recomputing every decoder layer costs ~25-30 % of a CPU step (benchmarks/README.md, real shapes, LoRA SFT at
# Qwen2.5-0.5B); on a CPU, ``auto`` spends at most MAX_SPEED_COST of the step to stay under the standard recipe's
# memory.
FULL_RECOMPUTE_SHARE = 0.30
MAX_SPEED_COST = 0.15


@dataclass(frozen=True)
class CheckpointingDecision:
    enabled: bool
    peak_without_bytes: float | None  # planned peak per device without checkpointing (None: not planned)
    budget_bytes: float | None
    device: str  # what the budget is: "80% of the H100-SXM's 80 GiB" / "50% of 24 GiB RAM / 2 processes"
    reasons: tuple[str, ...]  # each a Note (plan/notes.py); a caller may give words of its own
    layers: int | None = None  # when on: checkpoint only the lowest ``layers`` decoder layers (None: all of them)
    of_layers: int | None = None  # the model's decoder layers

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)

    def message(self) -> Note:
        state = Note("ckpt_on" if self.enabled else "ckpt_off")
        if self.enabled and self.layers is not None:
            state = Note("ckpt_lowest", k=self.layers, n=self.of_layers)
        return Note("note_ckpt", state=state, reasons=self.reasons)


def decide(peak_without: float, budget: float, device: str) -> CheckpointingDecision:
    """Off when the run's planned peak without checkpointing stays within ``budget`` bytes."""
    need, have = peak_without / GiB, budget / GiB
    if peak_without <= budget:
        within = Note("reason_within", need=need, have=have, device=device)
        return CheckpointingDecision(False, peak_without, budget, device, (within, Note("reason_force")))
    over = Note("reason_over", need=need, have=have, device=device)
    return CheckpointingDecision(True, peak_without, budget, device, (over,))


def fewest_layers(shape, setup, budget: float) -> tuple[int, float] | None:
    """``(k, planned peak)`` for the smallest k < layers whose peak with the lowest k layers checkpointed fits
    ``budget`` (the peak falls as k grows: binary search), or None when nothing does. k stops below the layer count:
    the top layer's recompute would run first thing in backward, rebuilding what it saved, so checkpointing it saves
    nothing."""

    def peak(k: int) -> float:
        return estimate_memory(shape, replace(setup, grad_ckpt=True, ckpt_layers=k)).total

    lo, hi = 1, shape.layers - 1
    if hi < lo or peak(hi) > budget:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if peak(mid) <= budget:
            hi = mid
        else:
            lo = mid + 1
    return lo, peak(lo)


def standard_peak(shape, setup) -> float:
    """The planned peak of the standard recipe for this very run: every layer checkpointed, the whole logits, no
    recompute recipes — what transformers' ``gradient_checkpointing`` runs as LLaMA-Factory and Axolotl default to."""
    standard = replace(
        setup, grad_ckpt=True, ckpt_layers=None, chunked_loss=False, liger_loss=False, recompute=(False, False)
    )
    return estimate_memory(shape, standard).total


def below_standard(shape, setup, decision: CheckpointingDecision) -> CheckpointingDecision:
    """On a CPU the run's memory is the host's RAM, shared with the data, the other processes and everything else on
    the machine, so fitting the budget is not the whole answer: when checkpointing the lowest layers brings the
    planned peak under :func:`standard_peak` for at most :data:`MAX_SPEED_COST` of the step, ``auto`` does that
    (each checkpointed layer costs ``FULL_RECOMPUTE_SHARE / layers`` of the step); otherwise speed wins."""
    target = standard_peak(shape, setup)
    if decision.peak_without_bytes <= target:
        return decision
    partial = fewest_layers(shape, setup, target)
    most = int(shape.layers * MAX_SPEED_COST / FULL_RECOMPUTE_SHARE)
    if partial is None or partial[0] > most:
        return decision
    k, with_k = partial
    return replace(
        decision,
        enabled=True,
        layers=k,
        of_layers=shape.layers,
        reasons=(
            Note("reason_standard", need=decision.peak_without_bytes / GiB, target=target / GiB),
            Note("reason_standard_lowest", k=k, gib=with_k / GiB, share=k / shape.layers * FULL_RECOMPUTE_SHARE),
        ),
    )


def decide_for(shape, setup, gpu=None, local_processes: int = 1) -> CheckpointingDecision:
    """The decision for ``setup`` (its own ``grad_ckpt`` is ignored) on ``gpu``, or on this host's RAM without one."""
    if gpu is None:  # the run trains on this host's CPU: glibc's heap, not the CUDA allocator (plan/memory.py)
        setup = replace(setup, host=True)
    peak = estimate_memory(shape, replace(setup, grad_ckpt=False, ckpt_layers=None)).total
    if gpu is not None:
        budget = gpu.memory_gib * GiB * GPU_SHARE
        where = Note("device_gpu", share=GPU_SHARE, gpu=gpu.name, gib=gpu.memory_gib)
    else:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        procs = Note("tail_procs", n=local_processes) if local_processes > 1 else None
        where = Note("device_ram", share=CPU_SHARE, gib=ram / GiB, procs=procs)
        budget = ram * CPU_SHARE / max(1, local_processes)
    decision = decide(peak, budget, where)
    if not decision.enabled:
        return decision if gpu is not None else below_standard(shape, setup, decision)
    partial = fewest_layers(shape, setup, budget)
    if partial is None:
        return replace(decision, of_layers=shape.layers)
    k, with_k = partial
    return replace(
        decision,
        layers=k,
        of_layers=shape.layers,
        reasons=(*decision.reasons, Note("reason_lowest", k=k, gib=with_k / GiB)),
    )


def planned_at(decision: CheckpointingDecision, setup, source: str) -> CheckpointingDecision:
    """``decision`` whose reason ends with the rows it was planned at (``source``: where ``setup.seq_len`` is from)."""
    rows = (
        Note("reason_rows", tokens=setup.seq_len, source=source)
        if not setup.token_budget
        else Note("reason_budget", budget=setup.token_budget)
    )
    return replace(decision, reasons=(*decision.reasons, rows))


def resolve_gradient_checkpointing(
    cfg: Config, gpu=None, world_size: int | None = None, longest_row: int | None = None, machine=None
):
    """Return ``cfg`` with ``gradient_checkpointing`` decided (True/False) when it is ``auto``, and the decision.

    ``gpu`` (a :class:`~tunekit.plan.gpus.GPU`) defaults to the first visible CUDA device; without one the
    budget is the host's RAM. ``longest_row``: the longest tokenized training row (None: ``cutoff_len``).
    ``machine``: the device the run trains on (``train/machine.run_machine``; None: the plan's, from ``use_cpu``),
    whose feature decisions the memory plan counts. ``plan/decide.decide_run`` is the caller.
    """
    if not checkpointing_is_auto(cfg):
        return cfg, None
    decision = _decision(cfg, gpu, world_size, longest_row, machine)

    values = {k: getattr(cfg, k) for k in cfg.model_fields_set}
    values["gradient_checkpointing"] = decision.enabled
    if decision.layers is not None and cfg.gradient_checkpointing_layers is None:
        values["gradient_checkpointing_layers"] = decision.layers
    return build_config(values), decision


def _decision(cfg: Config, gpu, world_size, longest_row, machine=None) -> CheckpointingDecision:
    world = world_size or env_world_size() or 1
    machine = machine or planned_machine(cfg, world)
    if gpu is None and machine.kind != "cpu":
        gpu = detect_gpu()
    nodes = env_nodes()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0) or max(1, world // max(1, nodes))
    try:
        seq, source = memory_seq_len(cfg, longest_row)
        shape = training_shape(cfg)
        setup = resolve_setup(cfg, world, nodes, seq, decide_features(cfg, machine), shape)
        if shape.vision is not None:  # a VLM: one image of image_max_pixels per sample (`tunekit plan` reads the data)
            media = assumed_media(shape.vision, cfg, None, None, None)
            setup = setup.with_(
                media_patches=setup.micro_batch * media.patches, largest_image_patches=media.image_patches
            )
        return planned_at(decide_for(shape, setup, gpu, local), setup, source)
    except ConfigError:
        raise  # the config's own problem (one the run refuses too, e.g. an OFT block size): said as it is
    except (TunekitError, OSError, ValueError, KeyError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(
            f"gradient_checkpointing: auto decides from the memory plan of {cfg.model_name_or_path}, which "
            f"could not be made ({first}): set gradient_checkpointing: true or false."
        ) from None
