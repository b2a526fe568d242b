"""Per-token log-probs a chunk of tokens at a time (train/chunked_head.py: dpo / kto) equal the whole-logits path.

The function test holds float64 against float64 with a bound derived for float64: the two paths differ only in the
order of their sums (``logsumexp`` per chunk vs ``log_softmax`` over all rows; the head matmul run on a chunk of rows
or on all of them; the token sums of d W), so each result differs by at most two summation orders
(``sum_order_bound``, Higham eq. 4.4) of the terms it is made of, carried linearly:

* logit ``z_ij = sum_k x_ik w_jk`` (h terms): ``e_z = sum_order_bound(h, max_ij sum_k |x_ik w_jk|)``;
* ``lse_i`` (V positive terms, relative error of the sum = absolute error of its log): ``sum_order_bound(V, 1) + e_z``;
* ``log p_i = z_it - lse_i``: ``e_p = sum_order_bound(V, 1) + 2 e_z``; ``softmax`` is off by a factor ``1 +- e_p``;
* ``d x_ik = s_i sum_j (onehot - p)_ij w_jk``: the V terms add up to at most ``2 |s_i| max|w|``, so
  ``|s_i| 2 max|w| e_p + sum_order_bound(V, 2 |s_i| max|w|)``;
* ``d w_jk = sum_i s_i (onehot - p)_ij x_ik`` (n terms of at most ``|s_i| |x_ik|``), the same form; ``d b`` with x = 1.

The model-level tests go through a whole tiny model (the same float64 weights, the same operations before the head),
where the bounds of tests/train/test_chunked_lm_head.py apply: ``sum_order_bound(V + n, max |g|)`` with float32's unit
roundoff on every gradient element — loose by ~1e9 for float64, as there, and still ~1e5 below what a wrong row, a
lost upstream gradient or a shifted label does (O(1e-2 .. 1)).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import base_config
from tests.stage_helpers import write_kto, write_preference
from tests.tolerances import FP64_U, sum_order_bound
from tunekit.config import load_config
from tunekit.train import chunked_head
from tunekit.train.batching import packed_row
from tunekit.train.chunked_head import chunked_token_logps, forward_sequence_logps
from tunekit.train.stages.reference_policy import forward_logps


def _function_bounds(x, w, s):
    n, h = x.shape
    V = w.shape[0]
    mag = (x.abs() @ w.abs().t()).max().item()
    e_z = sum_order_bound(h, mag, FP64_U)
    e_p = sum_order_bound(V, 1.0, FP64_U) + 2 * e_z
    wmax = w.abs().max().item()
    dx = s.abs()[:, None] * (2 * wmax * e_p + sum_order_bound(V, 2 * wmax, FP64_U))
    col = (s.abs()[:, None] * x.abs()).sum(0)  # per hidden column k: sum_i |s_i x_ik|
    dw = col[None, :] * e_p + sum_order_bound(n, 1.0, FP64_U) * col[None, :]
    sb = s.abs().sum().item()
    db = sb * e_p + sum_order_bound(n, sb, FP64_U)
    return e_p, dx, dw, db


@pytest.mark.parametrize("rows", [1, 3, 64])  # one row per chunk, a ragged last chunk (10 = 3+3+3+1), one chunk
@pytest.mark.parametrize(
    "trains", ["hidden", "head", "head+bias"]
)  # LoRA (d x formed in forward) / recompute in backward
def test_function_equals_log_softmax_gather(rows, trains):
    g = torch.Generator().manual_seed(0)
    n, h, vocab = 10, 16, 37
    x = torch.randn(n, h, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(vocab, h, dtype=torch.float64, generator=g, requires_grad=trains != "hidden")
    b = torch.randn(vocab, dtype=torch.float64, generator=g, requires_grad=True) if trains == "head+bias" else None
    t = torch.randint(0, vocab, (n,), generator=g)
    s = torch.randn(
        n, dtype=torch.float64, generator=g
    )  # a different upstream gradient per token, as a pair loss gives
    params = {"x": x, **({"w": w} if w.requires_grad else {}), **({"b": b} if b is not None else {})}

    ref = torch.log_softmax(F.linear(x, w, b), -1).gather(1, t[:, None]).squeeze(1)
    (ref * s).sum().backward()
    ref_grads = {k: p.grad.clone() for k, p in params.items()}
    for p in params.values():
        p.grad = None
    ours = chunked_token_logps(x, w, b, t, rows=rows)
    (ours * s).sum().backward()
    assert ours.dtype == torch.float64 and ours.shape == (n,)
    e_p, dx, dw, db = _function_bounds(x.detach(), w.detach(), s)
    assert ((ours - ref).abs() <= e_p).all(), (ours - ref).abs().max()
    assert ((x.grad - ref_grads["x"]).abs() <= dx).all()
    if "w" in params:
        assert ((w.grad - ref_grads["w"]).abs() <= dw).all()
    else:
        assert w.grad is None
    if "b" in params:
        assert ((b.grad - ref_grads["b"]).abs() <= db).all()
    with torch.no_grad():  # the reference's pass: no gradient buffers, the same values
        again = chunked_token_logps(x, w, b, t, rows=rows)
    assert not again.requires_grad and torch.equal(again, ours.detach())


def test_backward_twice_is_refused():
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(11, 8, dtype=torch.float64)
    out = chunked_token_logps(x, w, None, torch.tensor([0, 3, 10, 5]), rows=2).sum()
    out.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="chunked_lm_loss: false"):
        out.backward()


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _close(a: dict, b: dict, n: int, vocab: int):
    assert a.keys() == b.keys() and a
    scale = max(g.abs().max().item() for g in b.values())
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst <= sum_order_bound(vocab + n, scale), (worst, scale)  # float32's u: see the module doc


def _padded(vocab: int):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (3, 14), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    mask[2, 7:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :5] = -100  # the prompt
    return {"input_ids": ids, "attention_mask": mask}, labels


def _packed(vocab: int):
    g = torch.Generator().manual_seed(2)
    seqs = [torch.randint(5, vocab, (k,), generator=g).tolist() for k in (9, 6, 11)]
    labels = [[-100] * 3 + s[3:] for s in seqs]
    batch = packed_row(seqs, labels)
    return (
        {"input_ids": batch["input_ids"], "attention_mask": None, "position_ids": batch["position_ids"]},
        batch["token_labels"],
        batch["cu_seqlens"],
    )


def _model(path, lora: bool):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
    return model.train()


@pytest.mark.parametrize("fixture,lora", [("tiny_qwen", False), ("tiny_llama", False), ("tiny_qwen", True)])
@pytest.mark.parametrize("layout", ["padded", "padding_free"])
def test_model_logps_and_gradients_equal_the_whole_logits(fixture, lora, layout, request):
    """Full fine-tuning trains the head (tied in tiny_qwen, untied in tiny_llama: recompute in backward); LoRA leaves
    the tied head frozen (d x formed in the forward pass)."""
    model = _model(request.getfixturevalue(fixture), lora)
    vocab = model.config.vocab_size
    if layout == "padded":
        inputs, labels = _padded(vocab)
        cu = None
    else:
        inputs, labels, cu = _packed(vocab)
    weights = torch.tensor([0.7, -1.3, 0.4], dtype=torch.float64)  # a different upstream gradient per sequence
    plain, plain_n = forward_logps(model, labels=labels, cu_seqlens=cu, chunked=False, **inputs)
    (plain * weights).sum().backward()
    want = _grads(model)
    model.zero_grad()
    ours, ours_n = forward_sequence_logps(model, {**inputs, "use_cache": False}, labels, cu, rows=4)
    (ours * weights).sum().backward()
    assert torch.equal(ours_n, plain_n) and ours_n.tolist() == ([9, 5, 2] if cu is None else [6, 3, 8])
    n = int(ours_n.sum())
    assert (ours - plain).abs().max().item() <= sum_order_bound(vocab + n, plain.abs().max().item())
    _close(_grads(model), want, n, vocab)
    assert ("lm_head.weight" in want or "model.embed_tokens.weight" in want) == (not lora)


def test_a_model_that_changes_its_head_output_takes_the_plain_path_once(tmp_path, monkeypatch):
    """Gemma 2 soft-caps its logits after the head: the chunked log-probs would miss that; the head is remembered."""
    from tunekit.tiny.text import build_tiny_model

    model = _model(build_tiny_model(tmp_path / "gemma2", like="gemma2", seed=0), lora=False)
    inputs, labels = _padded(model.config.vocab_size)
    assert forward_sequence_logps(model, dict(inputs), labels) is None
    calls = []
    real = chunked_head.head_input
    monkeypatch.setattr(chunked_head, "head_input", lambda *a, **k: calls.append(1) or real(*a, **k))  # our own module
    assert forward_sequence_logps(model, dict(inputs), labels) is None and not calls  # not tried again
    with torch.no_grad():
        logits = model(**inputs).logits  # soft-capped
    want = torch.log_softmax(logits[:, :-1], -1).gather(-1, labels[:, 1:].clamp(min=0)[..., None])[..., 0]
    want = (want * (labels[:, 1:] != -100)).sum(-1)
    with torch.no_grad():
        got = forward_logps(model, labels=labels, **inputs)[0]
    assert torch.equal(got, want)


def _stage_trainer(stage, model_path, data_dir, out, **overrides):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.stages import dpo, kto

    cfg = load_config(None, base_config(model_path, data_dir, out, stage=stage, dtype="float64", **overrides))
    tokenizer = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tokenizer, stage)
    model = load_model(cfg, tokenizer)
    trainer = {"dpo": dpo, "kto": kto}[stage].build_trainer(
        cfg, build_training_arguments(cfg, []), model, tokenizer, data, []
    )
    with torch.no_grad():  # the adapter away from zero: policy and reference differ, so margins and rewards are not 0
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    return cfg, trainer, trainer.data_collator([data.train[i] for i in range(4)])


def _loss_and_grads(trainer, batch):
    model = trainer.model.train()
    model.zero_grad()
    loss = trainer.compute_loss(model, batch)
    loss.backward()
    return loss.detach(), _grads(model)


def _counting(monkeypatch):
    """Records each call of the chunked path: True where it computed the log-probs (not None: the fallback)."""
    calls = []
    real = chunked_head.forward_sequence_logps

    def counted(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(chunked_head, "forward_sequence_logps", counted)  # our own module
    return calls


@pytest.mark.parametrize("method", ["lora", "full"])
@pytest.mark.parametrize("padding_free", [False, True])
def test_every_dpo_variant_equals_the_whole_logits_path(tiny_qwen, tmp_path, monkeypatch, method, padding_free):
    write_preference(tmp_path / "data", "toy", n=8, seed=0)
    cfg, trainer, batch = _stage_trainer(
        "dpo", tiny_qwen, tmp_path / "data", tmp_path / "o", finetuning_type=method, padding_free=padding_free
    )
    calls = _counting(monkeypatch)
    vocab = trainer.model.config.vocab_size
    n = int((batch["token_labels"] != -100).sum())
    variants = [{"pref_loss": k} for k in ("sigmoid", "hinge", "ipo", "orpo", "simpo")]
    variants += [{"pref_loss": "sigmoid", "dpo_label_smoothing": 0.1, "pref_ftx": 0.5}]
    for update in variants:
        _configure(trainer, cfg.model_copy(update={**update, "chunked_lm_loss": False}))
        want_loss, want = _loss_and_grads(trainer, batch)
        assert not calls
        _configure(trainer, cfg.model_copy(update={**update, "chunked_lm_loss": True}))
        loss, grads = _loss_and_grads(trainer, batch)
        # the policy, and the reference (LoRA: the disabled adapter; full: the frozen copy) where the loss has one
        assert calls == [True] * (2 if update["pref_loss"] not in ("orpo", "simpo") else 1), update
        calls.clear()
        # the loss is a smooth function of the log-prob sums with slopes <= ~beta-scaled 1 (ipo: 1/beta^2 x margin)
        assert abs(loss.item() - want_loss.item()) <= sum_order_bound(
            vocab + n, 100 * max(1.0, abs(want_loss.item()))
        ), update
        _close(grads, want, n, vocab)


def _configure(trainer, cfg) -> None:
    """The trainer runs ``cfg`` as a run decides it: its options and the decisions made from them (train/decisions)."""
    from tunekit.train.decisions import decide_features

    trainer.tunekit_config = cfg
    trainer.run_decisions = decide_features(cfg, trainer.run_decisions.machine)


def test_kto_equals_the_whole_logits_path(tiny_qwen, tmp_path, monkeypatch):
    write_kto(tmp_path / "data", "toy", n=8, seed=0)
    cfg, trainer, batch = _stage_trainer(
        "kto", tiny_qwen, tmp_path / "data", tmp_path / "o", finetuning_type="lora", pref_ftx=0.3
    )
    calls = _counting(monkeypatch)
    loss, grads = _loss_and_grads(trainer, batch)
    assert calls == [True] * 4  # policy and its KL pairs, reference and its KL pairs
    calls.clear()
    _configure(trainer, cfg.model_copy(update={"chunked_lm_loss": False}))  # the whole-logits path
    want_loss, want = _loss_and_grads(trainer, batch)
    assert not calls
    vocab = trainer.model.config.vocab_size
    n = int((batch["token_labels"] != -100).sum())
    assert abs(loss.item() - want_loss.item()) <= sum_order_bound(vocab + n, 100 * max(1.0, abs(want_loss.item())))
    _close(grads, want, n, vocab)


def _as_accelerate_prepares_it(model):
    """``model`` with its forward wrapped the way accelerate's ``prepare_model`` does for bf16 mixed precision: bf16
    autocast inside, every 16-bit output converted to fp32 on the way out (a new tensor for the logits)."""
    from types import MethodType

    from accelerate.utils import convert_outputs_to_fp32

    forward = model.forward

    def autocast_forward(self, *args, **kwargs):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return forward(*args, **kwargs)

    model.forward = MethodType(convert_outputs_to_fp32(autocast_forward), model)
    return model


def test_the_chunked_head_runs_under_mixed_precision_wrappers(tiny_qwen, tmp_path):
    """bf16 autocast through accelerate's wrapper hands back fp32 copies of the outputs: the head's output check reads
    what the model itself returned, so the chunked path still runs (it fell back to whole logits before: 2.5x the
    peak RSS of a DPO run at Qwen2.5-0.5B's shape), while a soft-capping model still takes the plain path."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from tunekit.tiny.text import build_tiny_model

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.bfloat16)
    model = _as_accelerate_prepares_it(get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))).train()
    inputs, labels = _padded(model.config.vocab_size)
    got = forward_sequence_logps(model, {**inputs, "use_cache": False}, labels)
    assert got is not None and chunked_head.output_head(model) not in chunked_head._PLAIN_HEADS
    keep, targets = chunked_head.trained_positions(labels)
    fused = chunked_head.fused_forward(model, chunked_head.output_head(model), dict(inputs), keep, targets)
    assert fused is not None
    capped = _as_accelerate_prepares_it(_model(build_tiny_model(tmp_path / "gemma2", like="gemma2", seed=0), False))
    assert forward_sequence_logps(capped, dict(_padded(capped.config.vocab_size)[0]), labels) is None
