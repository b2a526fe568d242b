"""``train/host_heap``: freed heap memory that a forward pass strands is returned to the kernel."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
import torch

from tunekit.model.layers import decoder_layers

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="malloc_trim / mallinfo2 are glibc's",
)

# Strands 384 MiB in glibc's heap: 48 blocks of 8 MiB (below the 32 MiB mmap threshold host_malloc sets, so from the
# heap), each followed by a small block that stays allocated, then the big ones freed. None of it is at the heap's top,
# so no trim threshold returns it: it stays resident until malloc_trim. MODE: as a forward pass's check sees it
# (unused resident bytes over the pass's floor) or as backward's (anonymous RSS over its first reading). Prints that
# figure in MiB after stranding and after the guard's check, whether the guard trimmed, and its trim count.
STRAND = """
import ctypes
from tunekit.host import malloc as host_malloc
from tunekit.host.heap import HeapGuard
assert host_malloc.tune()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
libc.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
guard = HeapGuard(slack=64 << 20)
def strand(blocks=48, mib=8):
    big = []
    for _ in range(blocks):
        big.append(libc.malloc(mib << 20))
        libc.memset(big[-1], 1, mib << 20)
        small.append(libc.malloc(4096))
    for b in big:
        libc.free(b)
small = []
if MODE == "forward":
    guard.check()  # the floor: the pass's start
    strand()
    stranded = host_malloc.unused_resident_bytes()
    trimmed = guard.check()
    print(stranded >> 20, host_malloc.unused_resident_bytes() >> 20, trimmed, guard.trims)
elif MODE == "creep":  # two passes: 48 MiB stranded, within the slack, then 80 MiB
    import torch
    layer = torch.nn.Linear(2, 2)
    guard.before_pass(layer, ())  # the run's first pass: its reading is the floor
    start = host_malloc.anonymous_resident_bytes()
    strand(6)
    first = guard.check()  # 48 MiB of growth: within the slack, not even read
    guard.before_pass(layer, ())  # the next pass begins on top of what the first left
    strand(5, 16)  # too big for the first pass's 8 MiB holes: the heap grows again (part may reuse older free memory)
    grown, stranded = host_malloc.anonymous_resident_bytes() - start, host_malloc.unused_resident_bytes()
    trimmed = guard.check()
    print(stranded >> 20, host_malloc.unused_resident_bytes() >> 20, trimmed and not first, guard.trims, grown >> 20)
elif MODE == "regrow":  # a trim; the next pass grows back into the returned pages, then beyond the peak
    guard.check()
    strand()
    guard.check()  # 384 MiB stranded: trimmed
    strand(40)  # the same 8 MiB chunks again, 320 MiB of them: the pages fault back in, below the run's peak
    regrown = host_malloc.unused_resident_bytes()
    below = guard.check()
    strand(12, 16)  # 192 MiB more in new blocks: past the peak
    print(regrown >> 20, below, guard.check(), guard.trims)
else:  # backward: the first reading is the mark; growth over it is stranded
    guard.in_backward(None)
    strand()
    stranded = host_malloc.anonymous_resident_bytes()
    guard.in_backward(None)
    print(stranded >> 20, host_malloc.anonymous_resident_bytes() >> 20, guard.trims > 0, guard.trims)
"""


def _strand(mode: str = "forward", **env) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", f"MODE = {mode!r}\n" + STRAND],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


@pytest.mark.parametrize("mode", ["forward", "backward"])
def test_the_guard_returns_stranded_heap_memory(mode):
    stranded, after, trimmed, trims = _strand(mode)
    # 384 MiB were stranded; the small blocks between them keep one page each (48 x 4 KiB)
    # and the trim returns the rest
    assert trimmed == "True" and trims == "1"
    assert int(stranded) - int(after) >= 370, (stranded, after)


def test_what_passes_strand_within_the_slack_adds_up_across_passes():
    """Two passes strand freed memory that nothing reuses: 48 MiB, within the slack (64 MiB here), then 80 MiB in
    blocks too big for the first pass's holes (part of it may land in older free memory: the second pass alone grew
    the heap by 32 MiB here). Both marks are the run's, not the pass's. With them reset at every pass (the code
    before), the second pass's growth stayed within the slack, so there was no reading, and a reading would have
    taken the first pass's 48 MiB as its base: nothing was trimmed, and over an epoch the real-shape job's heap crept
    up by as much as a slack a pass."""
    stranded, after, trimmed, trims, grown = _strand("creep")
    assert int(grown) > 64, grown  # the two passes together: a reading (part of it may reuse older free memory)
    assert trimmed == "True" and trims == "1", (stranded, after, trimmed, trims, grown)
    assert int(stranded) - int(after) >= int(grown) - 8, (stranded, after, grown)  # the growth, less the small blocks


def test_growing_back_below_the_peak_is_left_alone():
    """After a trim the next passes reuse the returned pages, which fault back in: 320 MiB of free memory is resident
    again, but below the run's highest RSS it raises no peak, and trimming it at every pass would make every step
    page-fault it in (the guard as first written trimmed 111 times in the real-shape epoch). Growth past the peak
    is read and trimmed as before."""
    regrown, below, past, trims = _strand("regrow")
    assert int(regrown) >= 300, regrown  # stranded again, resident
    assert (below, past, trims) == ("False", "True", "2"), (regrown, below, past, trims)


def test_growth_within_the_slack_is_left_alone():
    from tunekit.host.heap import HeapGuard

    guard = HeapGuard(slack=1 << 40)
    assert not guard.check() and not guard.check()
    assert guard.trims == 0 and guard.floor is not None


def test_the_off_switch_turns_the_guard_off():
    with pytest.raises(AssertionError):  # tune() refuses, so the script stops at its first assert
        _strand(TUNEKIT_MALLOC_TUNE="0")
    from tunekit.host import heap as host_heap

    os.environ["TUNEKIT_MALLOC_TUNE"] = "0"
    try:
        assert host_heap.attach(torch.nn.Linear(2, 2), [], "cpu") is None
    finally:
        del os.environ["TUNEKIT_MALLOC_TUNE"]
    assert host_heap.attach(torch.nn.Linear(2, 2), [], "cuda") is None  # a GPU run: the host heap is not its memory
    assert host_heap.attach(torch.nn.Linear(2, 2), [], "cpu") is not None


def _sft_trainer(model_path, tmp_path, **overrides):
    from tests.helpers import alpaca_records, base_config, write_dataset
    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.stages import sft

    write_dataset(tmp_path / "data", "toy", alpaca_records(4))
    options = dict(dataset="toy", per_device_train_batch_size=4, dtype="float32", gradient_checkpointing=False)
    cfg = load_config(None, base_config(model_path, tmp_path / "data", tmp_path / "o", **{**options, **overrides}))
    tokenizer = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tokenizer, "sft")
    trainer = sft.build_trainer(
        cfg, build_training_arguments(cfg, []), load_model(cfg, tokenizer), tokenizer, data, []
    )
    return trainer, trainer.data_collator([trainer.train_dataset[i] for i in range(4)])


def test_tunekit_train_attaches_it_to_the_model_and_each_decoder_layer(tiny_qwen, tmp_path):
    """The trainer ``tunekit train`` builds has the guard; each layer's forward pass and the model's run its check, a
    no-grad forward (a reference, evaluation) does not; trimming at every growth leaves the loss
    the same, bit for bit."""
    trainer, batch = _sft_trainer(tiny_qwen, tmp_path)
    guard = trainer.heap_guard
    assert guard is not None
    model = trainer.model.train()
    checks = []
    plain_check = guard.check
    guard.check = lambda: checks.append(1) or plain_check()
    try:
        with_hooks = trainer.compute_loss(model, batch)
        assert len(checks) == len(decoder_layers(model)) + 1  # each layer, the pass's end
        with torch.no_grad():
            model(**{k: v for k, v in batch.items() if k != "labels"})
        assert len(checks) == len(decoder_layers(model)) + 1
    finally:
        guard.check = plain_check
    guard.slack = 0  # every growth trims: the math must not notice
    again = trainer.compute_loss(model, batch)
    assert torch.equal(with_hooks.detach(), again.detach())


def test_no_check_while_backward_recomputes_checkpointed_layers(tiny_qwen, tmp_path):
    """With gradient checkpointing, backward runs each layer's forward again: what it allocates there reuses what
    backward frees, so the guard stays out (it would otherwise count that freed memory as stranded and return it)."""
    trainer, batch = _sft_trainer(tiny_qwen, tmp_path, gradient_checkpointing=True)
    guard, model = trainer.heap_guard, trainer.model.train()
    checks = []
    plain_check = guard.check
    guard.check = lambda: checks.append(1) or plain_check()
    try:
        loss = trainer.compute_loss(model, batch)
        in_forward = len(checks)
        loss.backward()
    finally:
        guard.check = plain_check
    assert in_forward == len(decoder_layers(model)) + 1
    assert len(checks) == in_forward


def test_backward_reads_once_per_layer_and_leaves_the_gradients_alone(tiny_qwen, tmp_path):
    """Each layer's output carries a gradient hook: backward reads the heap as it reaches each layer. The hooks return
    nothing: the gradients equal, bit for bit, those of the same model and batch with the guard's hooks removed."""
    trainer, batch = _sft_trainer(tiny_qwen, tmp_path)
    guard, model = trainer.heap_guard, trainer.model.train()
    calls = []
    plain = guard.in_backward
    guard.in_backward = lambda grad: calls.append(grad.shape) or plain(grad)
    guard.slack = 0  # and every growth trims
    try:
        trainer.compute_loss(model, batch).backward()
    finally:
        guard.in_backward = plain
    assert len(calls) == len(decoder_layers(model))
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    ours = {n: p.grad.clone() for n, p in params}
    guard.detach()
    model.zero_grad()
    trainer.compute_loss(model, batch).backward()
    assert len(calls) == len(decoder_layers(model))  # no hook left
    assert ours
    for name, p in params:
        assert torch.equal(ours[name], p.grad), name
