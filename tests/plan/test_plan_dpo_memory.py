"""LoRA DPO memory: what the chunked log-probs hold at once, and what the planner counts for it.

The allocator's view is PyTorch's own count of CPU allocations and frees (``torch.profiler`` with ``profile_memory``):
exact bytes, no glibc retention. Measured with benchmarks/dpo_memory.py at Qwen2.5-0.5B's shape (4 layers, 2 pairs x
960 tokens, fp32): the chunk of the policy's log-probs held 3 chunks at once (1,548 MiB for 512 MiB chunks: the
previous chunk, still referenced as its gradient buffer ``g``, and ``torch.logsumexp``'s chunk-sized temporary),
one after the fix (527 MiB); docs/memory-model.md, section 3.7.
"""

from __future__ import annotations

import pytest
import torch

from tests.memory_helpers import allocations, held_at_reference_start, peak_of, saved_storage_bytes
from tunekit.train.chunked_head import chunked_token_logps


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
    peak = peak_of(allocations(lambda: chunked_token_logps(x, w, None, t, rows)))
    assert chunk <= peak <= chunk + others, (peak, chunk, others)


@pytest.mark.parametrize("head_trains", [False, True], ids=["frozen-head", "trained-head"])
def test_chunked_logps_allocate_the_logits_buffer_once(head_trains):
    """Every chunk of a call reuses one logits buffer: one chunk-sized allocation per pass (forward; the trained head's
    backward recomputes into its own), not one per chunk. On CPU a fresh 512 MiB block per chunk grew glibc's heap by
    about a chunk each time (small tensors are carved from the freed block), so RSS rose ~1.5 GiB per forward pass
    above the live bytes at Qwen2.5-0.5B's head (docs/memory-model.md, section 3.7)."""
    n, h, V, rows = 144, 32, 8192, 48  # 3 chunks of 1.5 MiB; d W is 1 MiB
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, h, generator=g, requires_grad=True)
    w = (torch.randn(V, h, generator=g) * 0.1).requires_grad_(head_trains)
    t = torch.randint(0, V, (n,), generator=g)
    chunk = rows * V * 4
    forward = allocations(lambda: chunked_token_logps(x, w, None, t, rows))
    assert sum(1 for b in forward if b >= chunk) == 1, [b for b in forward if b >= chunk]
    if head_trains:
        out = chunked_token_logps(x, w, None, t, rows)
        backward = allocations(lambda: out.sum().backward())
        assert sum(1 for b in backward if b >= chunk) == 1, [b for b in backward if b >= chunk]


def _dpo_trainer(model_path, data_dir, out, **overrides):
    from tests.helpers import base_config
    from tests.stage_helpers import write_preference
    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.stages import dpo

    write_preference(data_dir, "toy", n=8, seed=0)
    cfg = load_config(
        None,
        base_config(
            model_path,
            data_dir,
            out,
            stage="dpo",
            finetuning_type="lora",
            dtype="float32",
            per_device_train_batch_size=4,
            gradient_checkpointing=False,
            **overrides,
        ),
    )
    tokenizer = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tokenizer, "dpo")
    trainer = dpo.build_trainer(
        cfg, build_training_arguments(cfg, []), load_model(cfg, tokenizer), tokenizer, data, []
    )
    return cfg, trainer, trainer.data_collator([data.train[i] for i in range(4)])


def test_dpo_plan_holds_both_sequence_sets_and_one_chunk(tiny_qwen, tmp_path):
    """A LoRA DPO step of 4 pairs: the bytes the policy's forward pass saves for backward are the planner's for the 8
    sequences (within the 10 % of the activation model, tests/plan/test_plan_memory.py), and the step's allocator peak
    (policy forward, reference forward, backward; relative to its start) stays within the planned dynamic memory."""
    from tunekit.plan.activations import saved_bytes
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.memory import estimate_memory, sequences_setup
    from tunekit.plan.params import count_params
    from tunekit.plan.training_setup import resolve_setup
    from tunekit.train.chunked_head import chunk_rows

    cfg, trainer, batch = _dpo_trainer(tiny_qwen, tmp_path / "data", tmp_path / "o")
    model = trainer.model.train()
    saved_total = saved_storage_bytes(model, lambda: trainer.compute_loss(model, batch))
    width = batch["input_ids"].shape[1]
    shape = load_shape(str(tiny_qwen), None)
    setup = resolve_setup(cfg, seq_len=width)  # per_device_train_batch_size pairs of `width`-token sequences
    seqs = sequences_setup(setup)
    assert seqs.tokens == batch["input_ids"].numel() == 2 * setup.tokens
    planned_saved = saved_bytes(shape, seqs, count_params(shape, seqs))["total"]
    assert abs(saved_total - planned_saved) <= 0.10 * planned_saved, (saved_total, planned_saved)

    est = estimate_memory(shape, setup).components
    rows = min(seqs.tokens, chunk_rows(shape.vocab))
    assert est["logits"] == rows * shape.vocab * 4 + 4 * shape.hidden * rows  # one chunk over both sets, fp32
    peak = peak_of(allocations(lambda: trainer.compute_loss(model, batch).backward()))
    dynamic = est["activations"] + est["logits"] + est["fragmentation"]
    assert peak <= dynamic, (peak, dynamic)


def test_dpo_reference_forward_runs_before_the_policy_holds_activations(tiny_qwen, tmp_path):
    """The reference log-probs (LoRA: the policy with its adapter disabled, no grad) are computed before the policy's
    forward pass, so its transients never sit on top of the policy's saved activations: at its start the step holds no
    more than the batch's few per-sequence tensors (counted: under 5 % of the bytes the policy's forward saves)."""
    cfg, trainer, batch = _dpo_trainer(tiny_qwen, tmp_path / "data", tmp_path / "o")
    held, saved, calls = held_at_reference_start(trainer, trainer.model.train(), batch)
    assert saved > 0 and calls == 1
    assert held < 0.05 * saved, (held, saved)
