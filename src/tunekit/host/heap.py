"""CPU training: give freed heap memory back to the kernel when a forward pass leaves it stranded (issue 17).

On the CPU, PyTorch takes every tensor from glibc's ``malloc``. A forward pass allocates the activations it keeps
and, between them, transients it frees at once. Usually the next layer's transients reuse those holes. Sometimes
they do not: a small block allocated from another thread, or at another moment, splits a hole. The heap then grows
instead, and the freed memory stays resident. glibc returns free memory only from the top of the heap, and only
above the trim threshold (``host/malloc.py``: 1 GiB, so steps do not page-fault their buffers in again).

Measured at Qwen2.5-0.5B's shape (LoRA, fp32, 2 x 544 tokens, ``benchmarks/real_shape.py``, identical runs): at the
end of the longest micro-batch's forward pass, glibc held 1.5 GiB of live blocks. The process kept between 0.8 and
3.2 GiB of freed memory resident beside them, varying from run to run with the same seeds. Peak RSS was 4.4 to
6.5 GB for the same work.

:class:`HeapGuard` bounds that. After each decoder layer and after the whole forward pass (the LM head and
backward follow), it reads the anonymous RSS, a page count. Each time that has grown by :data:`SLACK`, it also reads
how much of it no live block holds (``host_malloc.unused_resident_bytes``: glibc's ``mallinfo2``, which walks every
free chunk). When that exceeds its lowest reading of the run by more than :data:`SLACK`, it calls
``malloc_trim``, which returns the whole pages of free chunks with ``madvise`` in milliseconds. In backward, a
gradient hook on each layer's output does the same with the anonymous RSS alone: backward frees more than it
allocates, so growth there is stranded. Neither runs while backward recomputes a checkpointed layer.

The forward readings come only once the heap has grown, that is once what the previous backward pass freed no longer
serves the pass's requests: free memory still resident then sits in holes the pass did not use. The floor is the
run's lowest reading (re-read after each trim), not the pass's: a per-pass floor took what earlier passes had
stranded within the slack as its base, and a whole epoch crept up by as much as a slack a pass (6.25 GB against 5.5
with the same job, docs/memory-model.md 3.8). Readings come only above the run's highest resident memory: the passes
after a trim grow back into the returned pages, which raises no peak, and trimming them again at every pass made
every step page-fault them in. Page faults are the one cost. Only for training forward passes with gradients, in a
run on the CPU; ``TUNEKIT_MALLOC_TUNE=0`` turns it off (``host/malloc.py``).
"""

from __future__ import annotations

import torch

from . import malloc as host_malloc

SLACK = host_malloc.GUARD_SLACK  # stranded freed memory allowed to accumulate before a trim


class HeapGuard:
    """Trims glibc's heaps when the process is about to reach a new peak of resident memory and the part of it no live
    block holds exceeds its lowest reading of the run by more than ``slack`` bytes (a forward pass's check), or
    backward's resident memory has grown by more than ``slack``."""

    def __init__(self, slack: int = SLACK):
        self.slack = slack
        self.floor = None  # the lowest reading of the run (or the one after the last trim): the heap's baseline
        self.read_at = None  # the lowest anonymous RSS since the last full reading
        self.high = 0  # the highest anonymous RSS seen: below it, stranded memory raises no peak, so nothing is read
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
        100k of them, so they are read only once the anonymous RSS (a page-count read) has grown by ``slack`` over its
        lowest reading since the last full one: stranded memory is resident, so it shows there first. Both marks are
        the run's, not the pass's: growth within the slack in each of many passes adds up to a reading. And only above
        the run's highest RSS: after a trim, the next passes grow back into the returned pages, which raises no peak,
        and trimming there again would only make every step page-fault them in."""
        anon = host_malloc.anonymous_resident_bytes()
        below_peak, self.high = anon <= self.high, max(self.high, anon)
        if self.read_at is not None and (below_peak or anon - self.read_at <= self.slack):
            self.read_at = min(self.read_at, anon)
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
            self.backward_mark = None
            if self.floor is None:  # the run's first pass: its base, before anything could be stranded
                self.floor = host_malloc.unused_resident_bytes()
                self.read_at = self.high = host_malloc.anonymous_resident_bytes()

    def after_layer(self, module, args, output) -> None:
        if self.in_pass:  # not a checkpointed layer's recompute in backward: that reuses what backward frees
            self.check()
            hidden = output[0] if isinstance(output, tuple) else output
            if torch.is_tensor(hidden) and hidden.requires_grad:
                hidden.register_hook(
                    self.in_backward
                )  # runs as backward reaches this layer; the gradient is unchanged

    def in_backward(self, _grad) -> None:
        """Backward frees more than it allocates, so its resident memory should not grow: when it grows by more than
        ``slack`` over its first reading (the top layer's backward, after the LM head), the growth is stranded; it is
        returned when it would make a new peak."""
        anon = host_malloc.anonymous_resident_bytes()
        below_peak, self.high = anon <= self.high, max(self.high, anon)
        if self.backward_mark is None or anon < self.backward_mark:
            self.backward_mark = anon
        elif anon - self.backward_mark > self.slack and not below_peak:
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
    guard.handles = [
        model.register_forward_pre_hook(guard.before_pass),
        *(layer.register_forward_hook(guard.after_layer) for layer in layers),
        model.register_forward_hook(guard.after_pass),
    ]
    return guard
