"""The LM head + cross-entropy in chunks of tokens (train/chunked_head.py) equals the plain path.

Tolerances, as in test_token_loss.py, from float32 arguments although the inputs and weights are float64 (the
chunked path keeps float64 logits for float64 weights, so these bounds are loose by ~1e9; they stay valid if a path
ever reduces in float32, as Hugging Face's loss does for half precision). The two paths differ only in how the
softmax is reduced (``logsumexp`` per chunk vs ``log_softmax`` over all rows)
and in the order of the token sum: at most ``loss_tolerance(n, loss)`` on a mean over n tokens, and on every gradient
element the rounding of a float32 normaliser of V terms plus the token sum, carried linearly through float64:
``sum_order_bound(V + n, max |g|)``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import alpaca_records, base_config, logged_losses, write_dataset
from tests.tolerances import loss_tolerance, sum_order_bound
from tunekit.config import load_config
from tunekit.flow import run_train
from tunekit.train.chunked_head import CHUNK_BYTES, chunk_rows, chunked_linear_cross_entropy, fused_forward, usable
from tunekit.train.token_loss import head_on, trained_positions


def _close(a: dict, b: dict, n: int, vocab: int):
    assert a.keys() == b.keys()
    scale = max(g.abs().max().item() for g in b.values())
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst <= sum_order_bound(vocab + n, scale), (worst, scale)


@pytest.mark.parametrize("rows", [1, 3, 64])  # one row per chunk, a ragged last chunk (10 = 3+3+3+1), one chunk
@pytest.mark.parametrize("bias", [False, True])
def test_function_equals_linear_then_cross_entropy(rows, bias):
    g = torch.Generator().manual_seed(0)
    n, h, vocab = 10, 16, 37
    x = torch.randn(n, h, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(vocab, h, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(vocab, dtype=torch.float64, generator=g, requires_grad=True) if bias else None
    t = torch.randint(0, vocab, (n,), generator=g)
    params = {"x": x, "w": w, **({"b": b} if bias else {})}

    # float64 weights keep float64 logits (``dtype: float64`` reference runs); half precision is upcast to fp32
    ref = F.cross_entropy(F.linear(x, w, b), t, reduction="sum")
    (ref * 0.5).backward()  # a non-unit upstream gradient (1 / num_items_in_batch in training)
    ref_grads = {k: p.grad.clone() for k, p in params.items()}
    for p in params.values():
        p.grad = None
    loss = chunked_linear_cross_entropy(x, w, b, t, rows=rows)
    (loss * 0.5).backward()
    assert loss.dtype == torch.float64
    assert abs(loss.item() - ref.item()) <= n * loss_tolerance(n, ref.item() / n)
    grads = {k: p.grad for k, p in params.items()}
    assert all(gr.dtype == torch.float64 for gr in grads.values())
    _close(grads, ref_grads, n, vocab)


def test_frozen_weight_gets_no_gradient_and_no_grad_mode_computes_none():
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(11, 8)
    t = torch.tensor([0, 3, 10, 5])
    loss = chunked_linear_cross_entropy(x, w, None, t, rows=2)
    loss.backward()
    assert w.grad is None and x.grad is not None
    with torch.no_grad():
        again = chunked_linear_cross_entropy(x, w, None, t, rows=2)
    assert not again.requires_grad and again.item() == pytest.approx(loss.item(), rel=1e-6)
    empty = chunked_linear_cross_entropy(x[:0], w, None, t[:0])
    assert empty.item() == 0.0


def test_chunk_size_is_512_mib_of_fp32_logits():
    rows = chunk_rows(151_936, torch.device("cpu"))
    assert rows == CHUNK_BYTES // (4 * 151_936) == 883 and rows == chunk_rows(151_936, torch.device("cuda"))
    assert chunk_rows(10**9) == 1


def _batch(vocab: int):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab, (2, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    labels = ids.clone()
    labels[0, :4] = -100
    labels[1, :6] = -100
    labels[1, 9:] = -100
    return ids, mask, labels


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _compare_with_models_loss(model):
    ids, mask, labels = _batch(model.config.vocab_size)
    model.zero_grad()
    ref = model(input_ids=ids, attention_mask=mask, labels=labels, num_items_in_batch=torch.tensor(7)).loss
    ref.backward()
    ref_grads = _grads(model)
    model.zero_grad()
    keep, targets = trained_positions(labels)
    head = model.get_output_embeddings()
    assert usable(head)
    outputs, total = fused_forward(model, head, {"input_ids": ids, "attention_mask": mask}, keep, targets, rows=3)
    assert outputs.logits.shape == (1, 0, model.config.vocab_size)  # the head ran on no rows
    loss = total / 7
    loss.backward()
    n = targets.numel()
    assert abs(loss.item() - ref.item()) <= loss_tolerance(n, ref.item())
    _close(_grads(model), ref_grads, n, model.config.vocab_size)


@pytest.mark.parametrize("fixture", ["tiny_qwen", "tiny_llama"])  # tied embedding (full: head trains) / untied
def test_full_model_equals_its_own_loss(fixture, request):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(request.getfixturevalue(fixture), dtype=torch.float64)
    _compare_with_models_loss(model.train())


def test_through_peft_lora_with_a_frozen_tied_head(tiny_qwen):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float64)
    model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
    assert not model.get_output_embeddings().weight.requires_grad
    _compare_with_models_loss(model.train())


def test_a_wrapped_head_is_not_usable(tiny_llama):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float64)
    model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", modules_to_save=["lm_head"]))
    assert not usable(model.get_output_embeddings())


def test_a_model_that_changes_its_head_output_gets_none(tmp_path):
    """Gemma 2 soft-caps the logits after the head: the fused loss would miss that, so the
    caller takes the plain path."""
    from transformers import AutoModelForCausalLM

    from tunekit.tiny.text import build_tiny_model

    path = build_tiny_model(tmp_path / "gemma2", like="gemma2", seed=0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64).train()
    assert model.config.final_logit_softcapping
    ids, mask, labels = _batch(model.config.vocab_size)
    keep, targets = trained_positions(labels)
    assert (
        fused_forward(model, model.get_output_embeddings(), {"input_ids": ids, "attention_mask": mask}, keep, targets)
        is None
    )
    with head_on(model.get_output_embeddings(), keep):  # the plain path still works after the attempt
        assert model(input_ids=ids, attention_mask=mask).logits.shape == (1, targets.numel(), model.config.vocab_size)


def test_training_with_and_without_chunks_gives_the_same_losses(tiny_qwen, tmp_path, monkeypatch):
    from tunekit.train import chunked_head

    calls = []
    real = chunked_head.fused_forward
    monkeypatch.setattr(
        chunked_head, "fused_forward", lambda *a, **k: calls.append(1) or real(*a, **k)
    )  # our own module
    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(16, seed=3))
    losses = {}
    for flag in (True, False):
        out = tmp_path / f"out-{flag}"
        cfg = base_config(
            tiny_qwen,
            data,
            out,
            finetuning_type="full",
            per_device_train_batch_size=2,
            gradient_accumulation_steps=2,
            max_steps=3,
            chunked_lm_loss=flag,
            gradient_checkpointing=False,
            dtype="float64",
        )
        run_train(load_config(None, cfg))
        losses[flag] = logged_losses(out)
        assert len(calls) == (3 * 2 if flag else 0)  # every micro-batch of the chunked run took the chunked path
        calls.clear()
    assert len(losses[True]) == 3
    # float64 weights: the logged losses differ only by the float32 cross-entropy over <= 2 x 2 x 64 tokens per step
    assert all(abs(a - b) <= loss_tolerance(256, b) for a, b in zip(losses[True], losses[False])), losses
