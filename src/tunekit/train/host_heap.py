"""CPU training: give freed heap memory back to the kernel when a forward pass leaves it stranded (issue 17).

On the CPU, PyTorch takes every tensor from glibc's ``malloc``. A forward pass allocates the activations it keeps
and, between them, transients it frees at once. Usually the next layer's transients reuse those holes. Sometimes
they do not: a small block allocated from another thread, or at another moment, splits a hole. The heap then grows
instead, and the freed memory stays resident. glibc returns free memory only from the top of the heap, and only
above the trim threshold (``host_malloc``: 1 GiB, so steps do not page-fault their buffers in again).

Measured at Qwen2.5-0.5B's shape (LoRA, fp32, 2 x 544 tokens, ``benchmarks/real_shape.py``, identical runs): at the
end of the longest micro-batch's forward pass, glibc held 1.5 GiB of live blocks. The process kept between 0.8 and
3.2 GiB of freed memory resident beside them, varying from run to run with the same seeds. Peak RSS was 4.4 to
6.5 GB for the same work.

:class:`HeapGuard` bounds that. After each decoder layer and after the whole forward pass (the LM head and
backward follow), it reads the anonymous RSS, a page count. Each time that has grown by :data:`SLACK`, it also reads
how much of it no live block holds (``host_malloc.unused_resident_bytes``: glibc's ``mallinfo2``, which walks every
free chunk). When that has grown by more than :data:`SLACK` over its lowest reading in the pass, it calls
``malloc_trim``, which returns the whole pages of free chunks with ``madvise`` in milliseconds. In backward, a
gradient hook on each layer's output does the same with the anonymous RSS alone: backward frees more than it
allocates, so growth there is stranded. Neither runs while backward recomputes a checkpointed layer. The memory the
previous backward pass freed is not touched: the forward pass reuses it (the reading falls while it does), and
returning it would only make every step page-fault it in again. Page faults are the one cost, and only where a later allocation reuses a returned page,
which by the growth was not being reused. Only for training forward passes with gradients, in a run on the CPU;
``TUNEKIT_MALLOC_TUNE=0`` turns it off (``host_malloc``).
"""

from __future__ import annotations

import torch

from .. import host_malloc

SLACK = 256 << 20  # stranded freed memory allowed to accumulate before a trim (a few layers' transients at 1k tokens)


class HeapGuard:
    """Trims glibc's heaps when the resident memory no live block holds grows by more than ``slack`` bytes within one
    forward pass."""

    def __init__(self, slack: int = SLACK):
        self.slack = slack
        self.floor = None  # the lowest reading since the pass began (or since the last trim)
        self.read_at = None  # the anonymous RSS at the last full reading
        self.trims = 0
        self.backward_mark = None  # the lowest anonymous RSS since backward began (or since the last trim there)
        self.handles = []  # the module hooks attach() registered
        self.in_pass = False  # inside a training forward pass of the model (not a no-grad one, not backward)

    def detach(self) -> None:
        """Remove the module hooks :func:`attach` registered (the gradient hooks of a pass already run go with it)."""
        for handle in self.handles:
            handle.remove()
        self.handles = []
        self.in_pass = False

    def check(self) -> bool:
        """One reading. glibc's bytes in use (``mallinfo2``) cost a walk over every free chunk, 90 ms in a process with
        100k of them, so they are read only once the anonymous RSS (a page-count read) has grown by ``slack`` since
        the last such reading: stranded memory is resident, so it shows there first. At most ``2 x slack`` strands."""
        anon = host_malloc.anonymous_resident_bytes()
        if self.read_at is not None and anon - self.read_at <= self.slack:
            return False
        self.read_at = anon
        unused = host_malloc.unused_resident_bytes()
        if unused is None:
            return False
        if self.floor is None or unused < self.floor:
            self.floor = unused
            return False
        if unused - self.floor <= self.slack:
            return False
        host_malloc.release_free_heap()
        self.trims += 1
        self.floor = host_malloc.unused_resident_bytes()
        self.read_at = host_malloc.anonymous_resident_bytes()
        return True

    def before_pass(self, module, args) -> None:
        self.in_pass = module.training and torch.is_grad_enabled()
        if self.in_pass:
            self.floor = self.backward_mark = None
            self.read_at = host_malloc.anonymous_resident_bytes()  # the first full reading comes with growth

    def after_layer(self, module, args, output) -> None:
        if self.in_pass:  # not a checkpointed layer's recompute in backward: that reuses what backward frees
            self.check()
            hidden = output[0] if isinstance(output, tuple) else output
            if torch.is_tensor(hidden) and hidden.requires_grad:
                hidden.register_hook(self.in_backward)  # runs as backward reaches this layer; the gradient is unchanged

    def in_backward(self, grad) -> None:
        """Backward frees more than it allocates, so its resident memory should not grow: when it grows by more than
        ``slack`` over its first reading (the top layer's backward, after the LM head), the growth is stranded."""
        anon = host_malloc.anonymous_resident_bytes()
        if self.backward_mark is None or anon < self.backward_mark:
            self.backward_mark = anon
        elif anon - self.backward_mark > self.slack:
            host_malloc.release_free_heap()
            self.trims += 1
            self.backward_mark = host_malloc.anonymous_resident_bytes()

    def after_pass(self, module, args, output) -> None:
        if self.in_pass:
            self.check()
        self.in_pass = False


def attach(model, layers, device) -> HeapGuard | None:
    """A :class:`HeapGuard` on ``model`` (the module the trainer calls) and on each of its decoder ``layers``, when the
    run trains on the CPU (``device``: the Trainer's; a GPU run's model may still be on the CPU while it is built)
    and glibc's functions are at hand; None otherwise."""
    if torch.device(device).type != "cpu" or not host_malloc.available():
        return None
    guard = HeapGuard()
    guard.handles = [model.register_forward_pre_hook(guard.before_pass),
                     *(layer.register_forward_hook(guard.after_layer) for layer in layers),
                     model.register_forward_hook(guard.after_pass)]
    return guard
