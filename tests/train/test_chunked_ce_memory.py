"""SFT's chunked LM head + cross-entropy: what it holds at once and how often it allocates a chunk.

The allocator's view is PyTorch's own count of CPU allocations and frees (``torch.profiler`` with ``profile_memory``),
as in tests/plan/test_plan_dpo_memory.py for the dpo/kto log-probs. Measured at Qwen2.5-0.5B's head (hidden 896,
151,936 words, 3,700 rows, fp32, forward + backward): the old forward held two chunks at once (the chunk's logits and
``torch.logsumexp``'s chunk-sized temporary; the 16-bit trained head a third, ``g.t().to(fp32)``) and allocated a fresh
chunk for every chunk; docs/memory-model.md, section 3.7.
"""

from __future__ import annotations

import pytest
import torch

from tests.memory_helpers import allocations, peak_of
from tunekit.train.chunked_head import chunked_linear_cross_entropy


def _head(n: int, h: int, V: int, head_trains: bool, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, h, generator=g).to(dtype).requires_grad_(True)
    w = (torch.randn(V, h, generator=g) * 0.1).to(dtype).requires_grad_(head_trains)
    return x, w, torch.randint(0, V, (n,), generator=g)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("head_trains", [False, True], ids=["frozen-head", "trained-head"])
def test_chunked_cross_entropy_holds_one_chunk_of_logits(head_trains, dtype):
    """The forward pass (where the gradients are formed) keeps at most one chunk of fp32 logits alive.

    Bound, from what the function must allocate: the chunk's fp32 logits (rows x V x 4, turned into exp, the softmax
    and the gradient in place); with a 16-bit head the matmul's 16-bit logits before their upcast and the 16-bit
    gradient for the 16-bit matmuls (rows x V x 2 each, never both alive) and the workspace of the CPU's 16-bit matmuls
    (measured 517 KiB, allowed 1 MiB); ``d hidden`` (n x h x s, s the head's element size), the chunk's ``g @ W``
    before its copy (rows x h x s), the trained head's fp32 ``d W`` (V x h x 4) and the chunk's ``x`` upcast (rows x h
    x 4); per-row vectors (max, target logit, sum, log, the arange, the scatter's values: fewer than 12 of at most 8 B
    each). A second fp32 chunk alive (logsumexp's temporary, the 16-bit gradient upcast again for ``d W``) adds rows x
    V x 4 = 2 MiB, more than everything else together."""
    n, h, V, rows = 192, 16, 8192, 64
    x, w, t = _head(n, h, V, head_trains, dtype)
    s = x.element_size()
    chunk = rows * V * 4
    others = (rows * V * 2 + (1 << 20) if s == 2 else 0) + n * h * s + rows * h * s + 12 * rows * 8
    if head_trains:
        others += V * h * 4 + rows * h * 4
    peak = peak_of(allocations(lambda: chunked_linear_cross_entropy(x, w, None, t, rows)))
    assert chunk <= peak <= chunk + others, (peak, chunk, others)


@pytest.mark.parametrize("head_trains", [False, True], ids=["frozen-head", "trained-head"])
def test_chunked_cross_entropy_allocates_the_logits_buffer_once(head_trains):
    """Every chunk of a forward pass reuses one logits buffer: one chunk-sized allocation per pass, not one per chunk
    (on CPU a fresh 512 MiB block per chunk grows glibc's heap by about a chunk each time, docs/memory-model.md 3.7);
    the backward pass only scales the gradients formed in the forward, so it allocates no chunk at all."""
    n, h, V, rows = 144, 32, 8192, 48  # 3 chunks of 1.5 MiB; d W is 1 MiB
    x, w, t = _head(n, h, V, head_trains)
    chunk = rows * V * 4
    forward = allocations(lambda: chunked_linear_cross_entropy(x, w, None, t, rows))
    assert sum(1 for b in forward if b >= chunk) == 1, [b for b in forward if b >= chunk]
    loss = chunked_linear_cross_entropy(x, w, None, t, rows)
    backward = allocations(loss.backward)
    assert [b for b in backward if b >= chunk] == []


@pytest.mark.parametrize("head_trains", [False, True], ids=["frozen-head", "trained-head"])
def test_chunked_cross_entropy_without_grad_holds_one_chunk(head_trains):
    """Under no_grad (evaluation) only the loss is computed: still one chunk-sized buffer for all the chunks."""
    n, h, V, rows = 144, 32, 8192, 48
    x, w, t = _head(n, h, V, head_trains)
    chunk = rows * V * 4
    with torch.no_grad():
        events = allocations(lambda: chunked_linear_cross_entropy(x, w, None, t, rows))
    assert sum(1 for b in events if b >= chunk) == 1, [b for b in events if b >= chunk]
    assert peak_of(events) <= chunk + 12 * rows * 8, peak_of(events)
