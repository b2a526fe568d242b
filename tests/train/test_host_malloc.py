"""``tunekit.host.malloc``: freed blocks stay in the heap, so a step's allocations do not page-fault again."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's"
)

# A training step in miniature: three 24 MiB buffers allocated, written, freed, ten times over. Prints the page
# faults of the last seven rounds (the first ones set glibc's dynamic thresholds).
STEPS = """
import ctypes, resource
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
libc.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
size = 24 << 20
for round in range(10):
    if round == 3:
        start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [libc.malloc(size) for _ in range(3)]
    for b in blocks:
        libc.memset(b, 1, size)
    for b in blocks:
        libc.free(b)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
"""


def _faults(prelude: str, **env) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", prelude + STEPS], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1])


def test_tuned_heap_reuses_freed_blocks_where_glibcs_defaults_fault_them_in_again():
    default = _faults("")
    tuned = _faults("from tunekit.host import malloc as host_malloc\nassert host_malloc.tune()\n")
    # 7 rounds x 72 MiB: with the defaults the heap top (72 MiB) is above the trim threshold (2 x 24 MiB) and goes back
    # to the kernel each round, ~18,000 faults per round in 4 KiB pages
    assert default > 7 * 1000, default
    assert tuned * 10 < default, (tuned, default)


def test_off_switch_and_the_train_program_applies_it_for_a_cpu_run():
    off = _faults(
        "from tunekit.host import malloc as host_malloc\nassert not host_malloc.tune()\n", TUNEKIT_MALLOC_TUNE="0"
    )
    # the `tunekit train` program tunes once the config says the run trains on the CPU, before the checks that refuse
    # it (here a model folder that does not exist)
    program = _faults(
        "from tunekit.cli import train_cmd\n"
        "try:\n    train_cmd.main(['use_cpu=true', 'model_name_or_path=/no/such/model', 'dataset=x'])\n"
        "except Exception as exc:\n    assert 'does not exist' in str(exc), exc\n"
        "else:\n    raise SystemExit('expected a model error')\n"
    )
    assert off > 7 * 1000, off
    assert program * 10 < off, (program, off)
