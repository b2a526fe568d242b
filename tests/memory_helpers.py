"""Counting CPU tensor memory in tests: the allocator's events under torch.profiler (exact bytes, not RSS noise)."""

from __future__ import annotations

import torch

from tunekit.config import load_config


def allocations(fn) -> list[int]:
    """The CPU allocator's events inside ``fn`` in order: bytes allocated (> 0) or freed (< 0)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    del out
    return [
        b
        for _, b in sorted(
            (e.start_ns(), e.nbytes())
            for e in prof.profiler.kineto_results.events()
            if e.name() == "[memory]" and e.device_type().name == "CPU"
        )
    ]


def peak_of(events: list[int]) -> int:
    """Peak of the live bytes over a sequence of allocator events (relative to its start)."""
    live = peak = 0
    for nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def held_at_reference_start(trainer, model, batch, method: str = "reference_logps") -> tuple[int, int, int]:
    """One ``compute_loss`` of a dpo/kto trainer: ``(bytes allocated before its ``method``
    (reference_logps) began, bytes the step's forward saved for backward, calls)``. Wraps the trainer
    instance's own method (not a library's)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    plain = getattr(trainer, method)
    calls = []

    def marked(*args, **kwargs):
        calls.append(1)
        with record_function(method):
            return plain(*args, **kwargs)

    setattr(trainer, method, marked)
    saved = []
    try:
        with (
            profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
            torch.autograd.graph.saved_tensors_hooks(
                lambda t: saved.append(t.untyped_storage().nbytes()) or t, lambda t: t
            ),
        ):
            loss = trainer.compute_loss(model, batch)
        assert torch.isfinite(loss)
        del loss
    finally:
        setattr(trainer, method, plain)
    events = prof.profiler.kineto_results.events()
    start = next(e.start_ns() for e in events if e.name() == method)
    held = sum(
        e.nbytes() for e in events if e.name() == "[memory]" and e.device_type().name == "CPU" and e.start_ns() < start
    )
    return held, sum(saved), len(calls)


def saved_storage_bytes(model, forward, params=None) -> int:
    """Bytes of the unique non-parameter storages autograd keeps for backward after ``forward()``, as tunekit train
    saves them: with ``elementwise_recompute`` on ``model`` its hooks are the innermost inside the decoder layers, so
    what they save as is (``kept``) joins what this outer hook sees; their recipes hold no storage of their own."""
    from tunekit.model.elementwise_recompute import state_of

    params = params if params is not None else {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}
    state = state_of(model)
    if state is not None:
        state.kept = seen

    def pack(t):
        seen.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = forward()
        del out  # what is saved is known after the forward pass; dropping the graph frees it
    finally:
        if state is not None:
            state.kept = None
    return sum(n for ptr, n in seen.items() if ptr not in params)


def measured_cfg(folder=None, seq: int = 32, batch: int = 1, gc: bool = False, **options):
    """A config planned for the device a test measures it on (``use_cpu``) and whose loss is transformers' own, as
    the measurement runs it (``labels=``: ``chunked_lm_loss`` off): the model in ``folder``, rows of ``seq`` tokens,
    ``batch`` rows, gradient checkpointing ``gc``; ``options`` add to or override these."""
    base = dict(
        cutoff_len=seq,
        per_device_train_batch_size=batch,
        gradient_checkpointing=gc,
        chunked_lm_loss=False,
        use_cpu=True,
        **({"model_name_or_path": str(folder)} if folder is not None else {}),
    )
    return load_config(None, {**base, **options})


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages under ``tensors`` (views of one storage counted once)."""
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())
