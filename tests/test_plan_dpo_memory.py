"""LoRA DPO memory (issue 17): what the chunked log-probs hold at once, and what the planner counts for it.

The allocator's view is PyTorch's own count of CPU allocations and frees (``torch.profiler`` with ``profile_memory``):
exact bytes, no glibc retention. Measured with benchmarks/dpo_memory.py at Qwen2.5-0.5B's shape (4 layers, 2 pairs x
960 tokens, fp32): the chunk of the policy's log-probs held 3 chunks at once (1,548 MiB for 512 MiB chunks: the
previous chunk, still referenced as its gradient buffer ``g``, and ``torch.logsumexp``'s chunk-sized temporary),
one after the fix (527 MiB); docs/memory-model.md, section 3.7.
"""

from __future__ import annotations

import pytest
import torch

from tunekit.train.chunked_head import chunked_token_logps


def _allocations(fn) -> list[int]:
    """The CPU allocator's events inside ``fn`` in order: bytes allocated (> 0) or freed (< 0)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    del out
    return [b for _, b in sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                                 if e.name() == "[memory]" and e.device_type().name == "CPU")]


def _allocator_peak(fn) -> int:
    """Peak of the live CPU tensor bytes allocated inside ``fn`` (relative to its start)."""
    events = _allocations(fn)
    live = peak = 0
    for nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


@pytest.mark.parametrize("head_trains", [False, True], ids=["frozen-head", "trained-head"])
def test_chunked_logps_hold_one_chunk_of_logits(head_trains):
    """The forward pass of the per-token log-probs keeps at most one chunk of logits alive.

    Bound, from what the function must allocate: the chunk's logits (rows x V x 4, turned into exp and then the
    gradient in place), the outputs (log-prob and logsumexp per token, 4 B each; the frozen head's ``d hidden``,
    n x h x 4), the chunk's ``g @ W`` before it is copied into ``d hidden`` (rows x h x 4), and per-row vectors of the
    chunk (max, target logit, sum, logsumexp, the arange and the scatter's indices and values: fewer than 8 of at most
    8 B each). A second chunk alive (the previous chunk's buffer or logsumexp's temporary) adds rows x V x 4 = 1 MiB,
    30x more than everything else together."""
    n, h, V, rows = 96, 32, 8192, 32
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, h, generator=g, requires_grad=True)
    w = (torch.randn(V, h, generator=g) * 0.1).requires_grad_(head_trains)
    t = torch.randint(0, V, (n,), generator=g)
    chunk = rows * V * 4
    others = 2 * n * 4 + n * h * 4 + rows * h * 4 + 8 * rows * 8
    peak = _allocator_peak(lambda: chunked_token_logps(x, w, None, t, rows))
    assert chunk <= peak <= chunk + others, (peak, chunk, others)


@pytest.mark.parametrize("head_trains", [False, True], ids=["frozen-head", "trained-head"])
def test_chunked_logps_allocate_the_logits_buffer_once(head_trains):
    """Every chunk of a call reuses one logits buffer: one chunk-sized allocation per pass (forward; the trained head's
    backward recomputes into its own), not one per chunk. On CPU a fresh 512 MiB block per chunk grew glibc's heap by
    about a chunk each time (small tensors are carved from the freed block), so RSS rose ~1.5 GiB per forward pass above
    the live bytes at Qwen2.5-0.5B's head (docs/memory-model.md, section 3.7)."""
    n, h, V, rows = 144, 32, 8192, 48  # 3 chunks of 1.5 MiB; d W is 1 MiB
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, h, generator=g, requires_grad=True)
    w = (torch.randn(V, h, generator=g) * 0.1).requires_grad_(head_trains)
    t = torch.randint(0, V, (n,), generator=g)
    chunk = rows * V * 4
    forward = _allocations(lambda: chunked_token_logps(x, w, None, t, rows))
    assert sum(1 for b in forward if b >= chunk) == 1, [b for b in forward if b >= chunk]
    if head_trains:
        out = chunked_token_logps(x, w, None, t, rows)
        backward = _allocations(lambda: out.sum().backward())
        assert sum(1 for b in backward if b >= chunk) == 1, [b for b in backward if b >= chunk]
