"""The global batch of a planned run and what it means for the learning rate.

The global batch is what one optimizer step averages over: devices x per-device batch x gradient accumulation
(tunekit's loss is normalised over the whole step, every rank's micro-batches included: ``train/token_loss.py``).
A config written and tuned for one device and then run on N data-parallel devices takes steps N times as large in
samples, with the same ``learning_rate``. The plan says so, with the common rule for scaling the learning rate:

- SGD-like optimizers: **linear** (learning rate x N). Goyal et al. 2017, "Accurate, Large Minibatch SGD: Training
  ImageNet in 1 Hour" (arXiv:1706.02677), who also show where it stops holding: it needs a gradual warm-up at the
  start, and broke down beyond about 8k samples per step for their model.
- Adam-family optimizers (AdamW, Adafactor, the 8-bit and paged variants, everything but SGD here): **square root**
  (learning rate x sqrt(N)). Malladi et al. 2022, "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms"
  (NeurIPS 2022, arXiv:2205.10287); Krizhevsky 2014, "One weird trick for parallelizing convolutional neural
  networks" (arXiv:1404.5997) for the square-root rule itself.

Both rules are approximations for moderate growth: past the critical batch size (McCandlish et al. 2018, "An
Empirical Model of Large-Batch Training", arXiv:1812.06162) a larger batch buys little per sample and no learning
rate makes up for it, and a learning rate scaled up without warm-up can diverge in the first steps. The plan states
the thresholds it uses (:data:`LARGE_SCALE`, :data:`LARGE_BATCH`) and asks for a warm-up when the config has none.
"""

from __future__ import annotations

import math
from typing import Any

from ..config.problems import Said
from ..config.schema import Config
from ..errors import ConfigError

LARGE_SCALE = 8  # growth over one device's batch past which the plan says the rules stop being safe
LARGE_BATCH = 8192  # samples per step: Goyal et al.'s limit of the linear rule


def lr_rule(optim: str) -> str:
    """``"linear"`` for SGD-like optimizers, ``"sqrt"`` for the Adam family (every other optimizer name)."""
    return "linear" if "sgd" in optim.lower() else "sqrt"


def data_parallel_size(cfg: Config, processes: int) -> int:
    """The data-parallel degree of ``processes`` training processes: each sequence group of ``cp_size`` of them
    (context parallelism, ``train/engines/ulysses.py``) trains the same micro-batch, so ``processes // cp_size``
    micro-batches make one accumulation step (``train/context_parallel.SequenceGroupSampler``). The one place the
    planner divides by ``cp_size`` for the batch and the steps; the tokens of a process: ``Setup.tokens``."""
    if processes % cfg.cp_size:
        raise ConfigError(Said("plan_cp_world", cp=cfg.cp_size, world=processes))
    return processes // cfg.cp_size


def global_batch(cfg: Config, world: int, budget: int | None = None, processes: int | None = None) -> dict[str, Any]:
    """The global batch of ``cfg`` on ``world`` data-parallel devices (``budget``: ``max_tokens_per_batch``, whose
    batches count tokens, not samples) and the learning-rate advice when ``world`` is not 1; under context
    parallelism ``world`` is the sequence groups of the ``processes``, which the dict then names too."""
    per_device = budget or cfg.per_device_train_batch_size
    one_device = per_device * cfg.gradient_accumulation_steps
    rule = lr_rule(cfg.optim)
    factor = world if rule == "linear" else math.sqrt(world)
    out: dict[str, Any] = {
        "devices": world,
        "per_device_batch": per_device,
        "unit": "tokens" if budget else "samples",
        "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
        "size": one_device * world,
        "one_device_size": one_device,
        "learning_rate": cfg.learning_rate,
        "lr_rule": rule,
        "scaled_learning_rate": cfg.learning_rate * factor,
        "advice": [] if world == 1 else advice(cfg, world, one_device, budget),
    }
    if cfg.cp_size > 1:  # keys left out without context parallelism
        out.update(processes=processes or world * cfg.cp_size, cp_size=cfg.cp_size)
    return out


def advice(cfg: Config, world: int, one_device: int, budget: int | None) -> list[str]:
    """The lines ``tunekit plan`` prints under the global batch when ``world`` differs from 1."""
    unit = "tokens" if budget else "samples"
    lr, rule = cfg.learning_rate, lr_rule(cfg.optim)
    if rule == "sqrt":
        how = (
            f"{cfg.optim} is Adam-family: the common rule scales it with the square root of the batch, "
            f"{lr:g} x sqrt({world}) = {lr * math.sqrt(world):.3g} (SGD-like optimizers: linearly, x {world})"
        )
    else:
        how = (
            f"{cfg.optim} is SGD-like: the common rule scales it linearly with the batch, {lr:g} x {world} = "
            f"{lr * world:.3g} (Adam-family optimizers: with the square root, x {math.sqrt(world):.3g})"
        )
    lines = [
        f"learning rate: the global batch is {world} x one device's ({one_device:,} {unit}); if learning_rate "
        f"{lr:g} was tuned on one device, {how}.",
        f"learning rate: the rules hold for moderate growth only: past {LARGE_SCALE} x one device's batch or "
        f"about {LARGE_BATCH:,} samples per step they stop being safe (the first steps diverge, or a larger batch "
        "gains nothing per sample): raise it gradually after a warm-up and check the first steps' loss.",
    ]
    size = one_device * world
    if world > LARGE_SCALE or (not budget and size > LARGE_BATCH):
        lines.append(
            f"learning rate: this plan is past that ({world} x one device's batch, {size:,} {unit} per step): do not "
            "scale learning_rate by the full factor without trying the first steps at the smaller rates."
        )
    if not (cfg.warmup_steps or cfg.warmup_ratio):
        lines.append(
            "learning rate: this config has no warm-up: add warmup_ratio: 0.05 to 0.1 (or warmup_steps) before "
            "scaling learning_rate up."
        )
    return lines
