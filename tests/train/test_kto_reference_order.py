"""KTO computes its reference log-probs, and the policy's no-grad KL-pair log-probs, before the policy's forward pass
(as dpo does).

The reference forward (LoRA: the policy with its adapter disabled; no grad; the examples and their KL pairs) then comes
and goes while the step holds nothing, instead of putting its transients on top of the policy's saved activations (and,
on the CPU, splitting glibc's heap around them); docs/memory-model.md, section 3.7.
"""

from __future__ import annotations

import torch

from tests.memory_helpers import held_at_reference_start


def _kto_trainer(model_path, data_dir, out, **overrides):
    from tests.helpers import base_config
    from tests.stage_helpers import write_kto
    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.stages import kto

    write_kto(data_dir, "toy", n=8, seed=0)
    options = dict(
        stage="kto",
        finetuning_type="lora",
        dtype="float32",
        per_device_train_batch_size=4,
        gradient_checkpointing=False,
    )
    cfg = load_config(None, base_config(model_path, data_dir, out, **{**options, **overrides}))
    tokenizer = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tokenizer, "kto")
    trainer = kto.build_trainer(
        cfg, build_training_arguments(cfg, []), load_model(cfg, tokenizer), tokenizer, data, []
    )
    return trainer, trainer.data_collator([trainer.train_dataset[i] for i in range(4)])


def test_kto_reference_forward_runs_before_the_policy_holds_activations(tiny_qwen, tmp_path):
    """At the reference forward's start the step holds no more than the batch's few per-example tensors (counted: under
    5 % of the bytes the policy's forward saves for backward); after the policy's forward it
    would hold all of those."""
    trainer, batch = _kto_trainer(tiny_qwen, tmp_path / "data", tmp_path / "o")
    held, saved, calls = held_at_reference_start(trainer, trainer.model.train(), batch)
    assert saved > 0 and calls == 1
    assert held < 0.05 * saved, (held, saved)


def test_kto_kl_forward_runs_before_the_policy_holds_activations(tiny_qwen, tmp_path):
    """The same for the policy's KL-pair forward (no grad): it used to run after the policy's forward, on top of all
    the activations that forward saved for backward (held would then exceed ``saved``)."""
    trainer, batch = _kto_trainer(tiny_qwen, tmp_path / "data", tmp_path / "o")
    held, saved, calls = held_at_reference_start(trainer, trainer.model.train(), batch, "policy_kl_logps")
    assert saved > 0 and calls == 1
    assert held < 0.05 * saved, (held, saved)


def test_kto_loss_unchanged_by_the_reference_order(tiny_qwen, tmp_path):
    """The same loss and gradients whether the reference comes from the step (now first) or precomputed in the batch
    (no reference forward in the step): the order changes no math (float64, so the two agree to rounding)."""
    trainer, batch = _kto_trainer(tiny_qwen, tmp_path / "data", tmp_path / "o", dtype="float64")
    model = trainer.model.train()
    ref, ref_kl = trainer.reference_logps(model, batch)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = []
    for inputs in (batch, {**batch, "ref_logps": ref, "ref_kl_logps": ref_kl}):
        model.zero_grad()
        loss = trainer.compute_loss(model, inputs)
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in params]))
    (loss_a, ga), (loss_b, gb) = grads
    assert loss_a.dtype == torch.float64
    torch.testing.assert_close(loss_a, loss_b, rtol=0, atol=1e-12)
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
