"""glibc's malloc in a training process: keep freed blocks for the next step instead of returning them.

Every training step allocates and frees the same large tensors (activations, gradients, attention and
optimizer buffers), and PyTorch's CPU allocator takes them from ``malloc``. glibc's defaults return
big blocks to the kernel as soon as they are freed:
- blocks above the mmap threshold get their own mapping, which is unmapped when freed. The threshold
  starts at 128 KiB and rises to the size of the last such block freed, at most 32 MiB;
- free memory at the top of the heap beyond the trim threshold (twice the mmap threshold) is released.
So the next step page-faults the same memory back in, and the kernel zeroes every page first. On the
MFU benchmark (14.75M llama, fp32, batch 16 x 256) that came to 24,000-52,000 page faults and 0.17 s
of system CPU per ~2.3 s step.

:func:`tune` calls glibc's ``mallopt``, the documented way to change these settings for a running
process (the ``MALLOC_*_`` variables only work when set before the process starts):
- the mmap threshold goes to its maximum, 32 MiB. Smaller blocks come from the heap and are reused
  there;
- the trim threshold goes to 1 GiB;
- the heap grows 64 MiB at a time.
Measured on that benchmark: 400-3,000 page faults and 0.05-0.08 s of system CPU per step. Peak RSS moves
by -2 to +4 % (freed memory is kept for reuse). On the LoRA job of ``benchmarks/lf_compare.py`` the whole
run's page faults fall from 480-650k to 170-180k. Blocks over 32 MiB (full-vocabulary logits, say) still
get their own mapping: glibc allows no higher threshold.

``tunekit train`` calls it for a run on the CPU once the config is read (``tunekit/flow.py`` ``start_host``, as
``train/decisions/cpu_host.py`` decides: off by default on a GPU, never measured there), as does
``benchmarks/mfu.py``. ``TUNEKIT_MALLOC_TUNE=0`` keeps glibc's defaults (and turns :func:`unused_resident_bytes` /
:func:`release_free_heap` off, see host/heap.py). It does nothing where the C library is not glibc (musl, macOS),
and it does not touch GPU memory, which PyTorch's CUDA caching allocator already reuses.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

from ..env import env_flag

M_TRIM_THRESHOLD = -1  # <malloc.h> parameter numbers
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

SETTINGS = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 1 << 30, M_TOP_PAD: 64 << 20}
# host/heap.py's HeapGuard trims once freed memory left resident in a training pass has grown by this much (a
# few layers' transients at 1k tokens); plan/memory.py bounds the CPU's fragmentation with it.
GUARD_SLACK = 256 << 20


def enabled() -> bool:
    return env_flag("TUNEKIT_MALLOC_TUNE", True)


def tune() -> bool:
    """Apply :data:`SETTINGS` with glibc's ``mallopt``; True if every one was accepted."""
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    accepted = [mallopt(param, value) == 1 for param, value in SETTINGS.items()]  # each one, even after a refusal
    return all(accepted)


def _glibc():
    """The process's C library when it is glibc on Linux and tuning is on (``TUNEKIT_MALLOC_TUNE``), else None."""
    if not enabled() or not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


_LIBC = {}


def _libc():
    """glibc's ``mallinfo2`` and ``malloc_trim`` (glibc >= 2.33 for mallinfo2), or None where tuning is off or
    absent."""
    if not enabled():
        return None
    if "fns" not in _LIBC:
        libc, fns = _glibc(), None
        try:
            if libc is not None:
                info, trim = libc.mallinfo2, libc.malloc_trim
                info.restype = _Mallinfo2
                trim.argtypes, trim.restype = (ctypes.c_size_t,), ctypes.c_int
                fns = (info, trim)
        except AttributeError:
            fns = None
        _LIBC["fns"] = fns
    return _LIBC["fns"]


def available() -> bool:
    """glibc's heap can be read and trimmed here: what host/heap.py's guard needs."""
    return _libc() is not None


def unused_resident_bytes() -> int | None:
    """Anonymous resident memory not held by a live malloc block: the process's anonymous RSS (``/proc/self/statm``
    resident - shared) minus glibc's bytes in use (``mallinfo2``: heap blocks + mmapped blocks). Freed heap memory
    that is still resident is part of it, and so is a constant share of memory that malloc does not manage (the
    interpreter's own arenas, libraries' data): compare two readings, not one with zero."""
    fns = _libc()
    if fns is None:
        return None
    anon = anonymous_resident_bytes()
    info = fns[0]()
    return anon - (info.uordblks + info.hblkhd)


def anonymous_resident_bytes() -> int:
    """The process's resident memory that is not a file's pages (``/proc/self/statm``: resident - shared)."""
    with open("/proc/self/statm") as f:
        fields = f.read().split()
    return (int(fields[1]) - int(fields[2])) * _PAGE


def release_free_heap() -> bool:
    """Return the free pages inside glibc's heaps to the kernel (``malloc_trim(0)``: ``madvise(MADV_DONTNEED)`` on
    every free chunk's whole pages, which the trim threshold never does for free memory below the heap's top)."""
    fns = _libc()
    return fns is not None and fns[1](0) == 1


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
