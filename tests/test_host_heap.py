"""``train/host_heap``: freed heap memory that a forward pass strands is returned to the kernel (issue 17)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
import torch

from tunekit.model.layers import decoder_layers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                                reason="malloc_trim / mallinfo2 are glibc's")

# Strands 384 MiB in glibc's heap: 48 blocks of 8 MiB (below the 32 MiB mmap threshold host_malloc sets, so from the
# heap), each followed by a small block that stays allocated, then the big ones freed. None of it is at the heap's top,
# so no trim threshold returns it: it stays resident until malloc_trim. MODE: as a forward pass's check sees it
# (unused resident bytes over the pass's floor) or as backward's (anonymous RSS over its first reading). Prints that
# figure in MiB after stranding and after the guard's check, whether the guard trimmed, and its trim count.
STRAND = """
import ctypes
from tunekit import host_malloc
from tunekit.train.host_heap import HeapGuard
assert host_malloc.tune()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
libc.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
guard = HeapGuard(slack=64 << 20)
def strand():
    big = []
    for _ in range(48):
        big.append(libc.malloc(8 << 20))
        libc.memset(big[-1], 1, 8 << 20)
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
else:  # backward: the first reading is the mark; growth over it is stranded
    guard.in_backward(None)
    strand()
    stranded = host_malloc.anonymous_resident_bytes()
    guard.in_backward(None)
    print(stranded >> 20, host_malloc.anonymous_resident_bytes() >> 20, guard.trims > 0, guard.trims)
"""


def _strand(mode: str = "forward", **env) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", f"MODE = {mode!r}\n" + STRAND], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


@pytest.mark.parametrize("mode", ["forward", "backward"])
def test_the_guard_returns_stranded_heap_memory(mode):
    stranded, after, trimmed, trims = _strand(mode)
    # 384 MiB were stranded; the small blocks between them keep one page each (48 x 4 KiB) and the trim returns the rest
    assert int(stranded) >= 380, stranded  # forward: stranded alone; backward: the whole anonymous RSS, at least that
    assert trimmed == "True" and trims == "1"
    assert int(stranded) - int(after) >= 370, (stranded, after)


def test_growth_within_the_slack_is_left_alone():
    from tunekit.train.host_heap import HeapGuard

    guard = HeapGuard(slack=1 << 40)
    assert not guard.check() and not guard.check()
    assert guard.trims == 0 and guard.floor is not None


def test_the_off_switch_turns_the_guard_off():
    with pytest.raises(AssertionError):  # tune() refuses, so the script stops at its first assert
        _strand(TUNEKIT_MALLOC_TUNE="0")
    from tunekit.train import host_heap

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
    trainer = sft.build_trainer(cfg, build_training_arguments(cfg, []), load_model(cfg, tokenizer), tokenizer, data, [])
    return trainer, trainer.data_collator([trainer.train_dataset[i] for i in range(4)])


def test_tunekit_train_attaches_it_to_the_model_and_each_decoder_layer(tiny_qwen, tmp_path):
    """The trainer ``tunekit train`` builds has the guard; each layer's forward pass and the model's run its check, a
    no-grad forward (a reference, evaluation) does not; trimming at every growth leaves the loss the same, bit for bit."""
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
