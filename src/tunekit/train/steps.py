"""Sample and step arithmetic: the one place where samples become optimizer steps.

``tunekit plan`` and ``tunekit train`` both call these functions, and a test holds them equal to
what the Hugging Face Trainer actually does (transformers 5: the last, partial accumulation window of
an epoch still makes an optimizer step, so steps per epoch round *up*).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..data.split import split_sizes  # noqa: F401 - data/pipeline.py splits with it; plan and train count with it


@dataclass(frozen=True)
class StepPlan:
    train_samples: int
    world_size: int
    micro_batches_per_device: int  # per epoch
    effective_batch_size: int
    steps_per_epoch: int
    total_steps: int
    num_epochs: float
    warmup_steps: int
    num_checkpoints: int

    def to_dict(self) -> dict:
        return asdict(self)


def plan_steps(
    train_samples: int,
    per_device_train_batch_size: int,
    gradient_accumulation_steps: int,
    world_size: int = 1,
    num_train_epochs: float = 3.0,
    max_steps: int = -1,
    warmup_steps: int = 0,
    warmup_ratio: float = 0.0,
    save_strategy: str = "steps",
    save_steps: float = 500,
    dataloader_drop_last: bool = False,
    num_batches: int | None = None,
) -> StepPlan:
    """Mirror of ``Trainer.set_initial_training_values`` for a map-style dataset.

    The dataloader batches all ``N`` samples (``ceil(N / batch)`` batches, ``floor`` with drop_last);
    accelerate's ``BatchSamplerShard`` then deals whole batches to the ranks, ``ceil(batches / world)``
    each (it cycles back to the start to even them out; ``floor`` with drop_last); an epoch has
    ``ceil(micro_batches / accumulation)`` optimizer steps (transformers 5 steps on the last, partial
    accumulation window). Older transformers rounded that last division down.

    ``num_batches``: the micro-batches of an epoch when they are formed by token count (``max_tokens_per_batch``,
    ``train/token_budget.py``) instead of ``ceil(N / batch)``; the ranks still get ``ceil(batches / world)`` each.
    """
    if per_device_train_batch_size < 1 or gradient_accumulation_steps < 1 or world_size < 1:
        raise ValueError("batch size, gradient accumulation and world size must be >= 1")
    if num_batches is not None:
        batches = num_batches
        micro = math.ceil(batches / world_size)
    elif dataloader_drop_last:
        batches = train_samples // per_device_train_batch_size
        micro = batches // world_size
    else:
        batches = math.ceil(train_samples / per_device_train_batch_size)
        micro = math.ceil(batches / world_size)
    steps_per_epoch = max(micro // gradient_accumulation_steps + int(micro % gradient_accumulation_steps > 0), 1)
    if max_steps > 0:
        total = max_steps
        epochs = max_steps / steps_per_epoch
    else:
        total = math.ceil(num_train_epochs * steps_per_epoch)
        epochs = num_train_epochs
    warm = warmup_steps if warmup_steps > 0 else math.ceil(warmup_ratio * total)
    if save_strategy == "steps":
        every = int(save_steps) if save_steps >= 1 else max(1, math.ceil(save_steps * total))
        checkpoints = total // every + int(total % every != 0)  # the trainer also saves at the end
    elif save_strategy == "epoch":
        checkpoints = math.ceil(epochs)
    else:
        checkpoints = 0
    return StepPlan(
        train_samples=train_samples,
        world_size=world_size,
        micro_batches_per_device=micro,
        effective_batch_size=per_device_train_batch_size * gradient_accumulation_steps * world_size,
        steps_per_epoch=steps_per_epoch,
        total_steps=total,
        num_epochs=epochs,
        warmup_steps=warm,
        num_checkpoints=checkpoints,
    )
