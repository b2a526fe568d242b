"""The LM head on trained tokens only (train/token_loss.py) gives HF's causal-LM loss and gradients exactly.

Compared against the model's own ``labels=`` loss (``ForCausalLMLoss``) on a batch with a masked prompt
and right padding, for a tied-embedding Qwen2, an untied Llama and Gemma2 (final-logit soft-capping after
the head), with and without ``num_items_in_batch``, and through PEFT. Tolerance: 1e-6 on the loss and
on every gradient. The models run in float64 so that the only float32 step is the one both paths share on purpose:
the logits are cast to float32 for the cross-entropy (as Hugging Face's loss does). Two orders of that step differ by
at most ``loss_tolerance(n, loss)`` on the loss (n trained tokens) and, on every gradient element, by the rounding of
the float32 softmax (a normaliser of V terms) and of the token sum, carried linearly through the float64 layers:
``sum_order_bound(V + n, max |g|)``. Then end to end: ``trained_tokens_loss`` on and off give the same loss trajectory
with accumulation.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import alpaca_records, base_config, logged_losses, padded_lm_batch, write_dataset
from tests.tolerances import loss_tolerance, sum_order_bound
from tunekit.config import load_config
from tunekit.flow import run_train
from tunekit.train.token_loss import causal_lm_loss, head_on, trained_positions


@pytest.fixture(scope="module")
def tiny_gemma2(tmp_path_factory):
    from tunekit.tiny.text import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-gemma2") / "model", like="gemma2", seed=0)


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _compare(model, num_items):
    ids, mask, labels = padded_lm_batch(model.config.vocab_size)
    kwargs = {} if num_items is None else {"num_items_in_batch": torch.tensor(num_items)}
    model.zero_grad()
    ref = model(input_ids=ids, attention_mask=mask, labels=labels, **kwargs).loss
    ref.backward()
    ref_grads = _grads(model)
    model.zero_grad()
    keep, targets = trained_positions(labels)
    assert keep.sum().item() == targets.numel() == (labels[:, 1:] != -100).sum().item()
    with head_on(model.get_output_embeddings(), keep) as seen:
        out = model(input_ids=ids, attention_mask=mask)
    assert seen and out.logits.shape == (1, targets.numel(), model.config.vocab_size)
    loss = causal_lm_loss(out.logits, targets, kwargs.get("num_items_in_batch"))
    loss.backward()
    n, vocab = targets.numel(), model.config.vocab_size
    assert abs(loss.item() - ref.item()) <= loss_tolerance(n, ref.item()), (loss.item(), ref.item())
    grads = _grads(model)
    assert grads.keys() == ref_grads.keys()
    assert all(g.dtype == torch.float64 for g in grads.values())
    scale = max(g.abs().max().item() for g in ref_grads.values())
    worst = max((grads[k] - ref_grads[k]).abs().max().item() for k in grads)
    assert worst <= sum_order_bound(vocab + n, scale), (worst, scale)


@pytest.mark.parametrize("num_items", [None, 7])
@pytest.mark.parametrize("fixture", ["tiny_qwen", "tiny_llama", "tiny_gemma2"])
def test_loss_and_gradients_equal_the_models_own_loss(fixture, num_items, request):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(request.getfixturevalue(fixture), dtype=torch.float64)
    if fixture == "tiny_gemma2":
        assert model.config.final_logit_softcapping  # the post-head processing must still apply
    _compare(model.train(), num_items)


def test_through_peft_with_a_trainable_lm_head(tiny_llama):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float64)
    model = get_peft_model(
        model, LoraConfig(r=4, target_modules="all-linear", modules_to_save=["lm_head"], init_lora_weights=False)
    )
    _compare(model.train(), 9)


def test_a_micro_batch_without_trained_tokens_gives_zero_not_nan():
    logits = torch.randn(1, 0, 11, requires_grad=True)
    loss = causal_lm_loss(logits, torch.zeros(0, dtype=torch.long), None)
    assert loss.item() == 0.0


def test_wrong_hidden_shape_names_the_switch():
    head = torch.nn.Linear(4, 5)
    with (
        pytest.raises(RuntimeError, match="trained_tokens_loss: false"),
        head_on(head, torch.ones(2, 3, dtype=torch.bool)),
    ):
        head(torch.randn(2, 4, 4))


def test_training_on_and_off_gives_the_same_losses(tiny_qwen, tmp_path):
    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(16, seed=3))
    losses = {}
    for flag in (True, False):
        out = tmp_path / f"out-{flag}"
        cfg = base_config(
            tiny_qwen,
            data,
            out,
            finetuning_type="lora",
            per_device_train_batch_size=2,
            gradient_accumulation_steps=2,
            max_steps=3,
            trained_tokens_loss=flag,
            gradient_checkpointing=False,
            dtype="float64",
        )
        run_train(load_config(None, cfg))
        losses[flag] = logged_losses(out)
    assert len(losses[True]) == 3
    # float32 end to end, so the steps after the first depend on Adam's handling of gradients at the rounding floor;
    # the runs are float64 (dtype) and the logged loss differs only by its float32 cross-entropy over <= 2 x 2 x 64
    # tokens per step: loss_tolerance(256, loss).
    assert all(abs(a - b) <= loss_tolerance(256, b) for a, b in zip(losses[True], losses[False])), losses
