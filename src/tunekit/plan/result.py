"""``Plan``: what ``make_plan`` returns; ``Plan.to_json()`` is what ``tunekit plan --json`` prints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .notes import Note


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A planned run: steps, memory per device, time and fit (the JSON keys are in docs/memory-model.md §8).

    The nested sections (``model``, ``memory``, ``setup`` ...) are the JSON objects themselves. ``None`` marks what
    could not be planned: steps without data or ``--num-samples``, fit without a GPU.
    """

    model: dict[str, Any]
    """The model's shape (``ModelShape.to_dict``): name, type, layers, sizes, parameters, ``vision`` of a VLM."""
    world_size: int
    """Training processes: GPUs per node x nodes (data parallel, in sequence groups of ``cp_size`` under context
    parallelism: ``context_parallel``)."""
    nodes: int
    gpus_per_node: int
    num_samples: int | None = None
    """Samples (packed sequences under packing) before ``val_size`` holds some out."""
    train_samples: int | None = None
    """What ``val_size`` leaves to train: the samples the steps count."""
    eval_samples: int | None = None
    micro_batches_per_device: int | None = None
    """Per epoch."""
    effective_batch_size: int
    """Samples per optimizer step: micro-batch x accumulation x world size / cp_size."""
    global_batch: dict[str, Any] | None = None
    """The global batch (``devices`` x ``per_device_batch`` x ``gradient_accumulation_steps`` = ``size``, in
    ``unit``: samples, tokens under max_tokens_per_batch) and, with more than one device, the learning-rate
    ``advice`` (``plan/global_batch.py``: ``lr_rule`` linear or sqrt, ``scaled_learning_rate``)."""
    steps_per_epoch: int | None = None
    total_steps: int | None = None
    num_epochs: float | None = None
    warmup_steps: int | None = None
    num_checkpoints: int | None = None
    steps_per_epoch_floor_rounding: int | None = None
    """Steps per epoch as older transformers rounded them (down)."""
    batching: dict[str, Any] | None = None
    """Pad share and tokens per step of every batching mode, for measured data (``batching.batching_stats``)."""
    decisions: dict[str, dict[str, Any]]
    """Each feature as the run decides it on the planned device: ``{"on": bool, "why": str}``."""
    media: dict[str, Any] | None = None
    """A VLM's images/videos per sample, their tokens and patches."""
    seq_len: int
    """Tokens per sample the memory is planned for."""
    seq_len_source: str
    tokens_per_micro_batch: int
    context_parallel: dict[str, Any] | None = None
    """With ``cp_size`` > 1: ``cp_size``, ``cp_mode``, ``processes``, ``data_parallel`` (processes / cp_size: the
    micro-batches of one accumulation step) and ``tokens_per_process`` (1/cp_size of each row: what the activations
    are planned for)."""
    params: dict[str, Any]
    """``total``, ``trainable``, ``lora``, ``trainable_share``."""
    memory: dict[str, float]
    """Peak memory per device by component, in GiB; ``total_gib`` is their sum."""
    cpu_memory_gib: float
    """Host memory for offloaded states."""
    setup: dict[str, Any]
    """Method, engine, precision, checkpointing, attention, optimizer, micro-batch, accumulation."""
    time: dict[str, Any] | None = None
    """FLOPs and, with a known GPU, seconds (``time.estimate_time``); ``None`` without steps."""
    gpu: dict[str, Any] | None = None
    """The GPU planned for: ``name``, ``memory_gib``, ``bf16_tflops``."""
    fits: bool | None = None
    """Whether the peak fits the GPU with the safety margin; ``None`` without a GPU."""
    headroom_gib: float | None = None
    safety_margin: float | None = None
    overrides: dict[str, Any] | None = None
    """``--auto-fit``: the options to pass to ``tunekit train``."""
    fit: dict[str, Any] | None = None
    """``--auto-fit``: the chosen set-up, its memory, and what is missing when nothing fits."""
    notes: list[Note]
    """Each an English sentence (a ``str``) made from its key and values (``plan/notes.py``)."""

    def to_json(self) -> dict[str, Any]:
        """The dict ``tunekit plan --json`` prints: sections that were not planned are left out, in a fixed order."""
        out: dict[str, Any] = {
            "model": self.model,
            "world_size": self.world_size,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "num_samples": self.num_samples,
            "train_samples": self.train_samples,
            "eval_samples": self.eval_samples,
        }
        if self.total_steps is not None:  # in StepPlan's order
            out.update(
                micro_batches_per_device=self.micro_batches_per_device,
                effective_batch_size=self.effective_batch_size,
                steps_per_epoch=self.steps_per_epoch,
                total_steps=self.total_steps,
                num_epochs=self.num_epochs,
                warmup_steps=self.warmup_steps,
                num_checkpoints=self.num_checkpoints,
                steps_per_epoch_floor_rounding=self.steps_per_epoch_floor_rounding,
            )
        else:
            out.update(steps_per_epoch=None, total_steps=None, warmup_steps=None, num_checkpoints=None)
            out["effective_batch_size"] = self.effective_batch_size
        _put(out, "global_batch", self.global_batch)
        _put(out, "batching", self.batching)
        out["decisions"] = self.decisions
        _put(out, "media", self.media)
        out.update(
            seq_len=self.seq_len,
            seq_len_source=str(self.seq_len_source),  # plain data: the keys are in structured_notes
            tokens_per_micro_batch=self.tokens_per_micro_batch,
        )
        _put(out, "context_parallel", self.context_parallel)
        out.update(
            params=self.params,
            memory=self.memory,
            cpu_memory_gib=self.cpu_memory_gib,
            setup=self.setup,
        )
        _put(out, "time", self.time)
        if self.gpu is not None:
            out.update(gpu=self.gpu, fits=self.fits, headroom_gib=self.headroom_gib, safety_margin=self.safety_margin)
        else:
            out["fits"] = self.fits
        if self.fit is not None:
            out.update(overrides=self.overrides, fit=self.fit)
        out["notes"] = [str(note) for note in self.notes]
        out["structured_notes"] = [note.to_json() for note in self.notes]  # the same, as key and values
        return out


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        out[key] = value
