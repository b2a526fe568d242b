"""NEFTune (``neftune_noise_alpha``): tunekit passes it to transformers' TrainingArguments, and the Trainer's hook
noises the input embeddings of a real tunekit run (LoRA, trained-token loss) while training, within the documented
bound alpha / sqrt(L x d) (L: tokens per row of the batch, d: hidden size), and never in evaluation."""

from __future__ import annotations

import math

import pytest
import torch
import transformers.trainer
import yaml

from tests.helpers import alpaca_records, base_config, logged_losses, write_dataset
from tests.stage_helpers import write_preference
from tunekit.config import load_config
from tunekit.flow import run_train
from tunekit.train.arguments import training_arguments_kwargs

ALPHA = 5.0


def _spy_on_neftune(monkeypatch) -> list[tuple[float, bool, tuple, float, float]]:
    """Wrap the ``activate_neftune`` the Trainer calls: behind its hook, record for every embedding forward the alpha,
    the training flag, the output shape, the largest |noised - clean| and the largest |clean| entry."""
    original = transformers.trainer.activate_neftune
    seen: list[tuple[float, bool, tuple, float, float]] = []

    def spy(model, alpha, accelerator=None):
        handle = original(model, alpha, accelerator)
        (embeddings,) = [m for m in model.modules() if hasattr(m, "neftune_noise_alpha")]

        def record(module, inputs, output):  # runs after NEFTune's hook: ``output`` is the noised embedding
            clean = torch.nn.functional.embedding(inputs[0], module.weight)
            diff = (output - clean).abs().max().item()
            seen.append((alpha, module.training, tuple(output.shape), diff, clean.abs().max().item()))

        embeddings.register_forward_hook(record)
        return handle

    monkeypatch.setattr(transformers.trainer, "activate_neftune", spy)
    return seen


def _options(model, data, out, alpha) -> dict:
    return base_config(
        model,
        data,
        out,
        max_steps=2,
        neftune_noise_alpha=alpha,
        val_size=2,
        eval_strategy="steps",
        eval_steps=1,
        per_device_eval_batch_size=2,
    )


def test_neftune_noises_training_embeddings_within_the_bound_and_changes_the_loss(tiny_qwen, tmp_path, monkeypatch):
    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(10))
    seen = _spy_on_neftune(monkeypatch)
    noised = tmp_path / "noised"
    run_train(load_config(None, _options(tiny_qwen, data, noised, ALPHA)))

    training = [s for s in seen if s[1]]
    evaluation = [s for s in seen if not s[1]]
    assert len(training) == 2 and len(evaluation) == 2  # a micro-batch per step, an evaluation after each step
    _assert_within_bound(training)
    assert all(diff == 0.0 for *_, diff, _ in evaluation)  # eval mode: the embeddings untouched

    recorded = yaml.safe_load((noised / "tunekit_config.yaml").read_text())
    assert recorded["neftune_noise_alpha"] == ALPHA

    seen.clear()
    clean_run = tmp_path / "clean"
    run_train(load_config(None, _options(tiny_qwen, data, clean_run, 0)))
    assert seen == []  # 0 is off: no hook at all
    noised_losses, clean_losses = logged_losses(noised), logged_losses(clean_run)
    assert len(noised_losses) == len(clean_losses) == 2
    assert noised_losses[0] != clean_losses[0]  # same seed, same data: only the noise differs


def _assert_within_bound(training: list) -> None:
    eps = torch.finfo(torch.float32).eps
    for alpha, _, (_, length, hidden), diff, clean in training:
        assert alpha == ALPHA  # what the Trainer read from TrainingArguments
        bound = ALPHA / (length * hidden) ** 0.5  # transformers' neftune_post_forward_hook: uniform in +-bound
        # at most the bound (plus the rounding of clean + noise in fp32); at least half of it somewhere: the
        # chance that all length x hidden uniform draws stay under half of it is 2 ** -(length x hidden)
        assert bound / 2 < diff <= bound + eps * (clean + bound), (diff, bound)


def test_neftune_in_dpo_noises_the_policy_against_a_precomputed_reference(tiny_qwen, tmp_path, monkeypatch):
    """dpo with LoRA and precompute_ref_log_probs (the reference computed in eval mode before training): at the first
    step the LoRA policy equals its reference (B = 0), so without noise the loss is ln 2 (float64, then the Trainer's
    float32 loss accumulator: 0.69314706 logged, 1.2e-7 off); the noised policy's log-probs move it away."""
    write_preference(tmp_path / "pref", n=8)
    seen = _spy_on_neftune(monkeypatch)
    out = tmp_path / "dpo"
    options = base_config(tiny_qwen, tmp_path / "pref", out, stage="dpo", max_steps=1, dtype="float64")
    run_train(load_config(None, {**options, "precompute_ref_log_probs": True, "neftune_noise_alpha": ALPHA}))
    training = [s for s in seen if s[1]]
    assert training and len(training) == len(seen)  # only the policy's forwards ran under the hook, all in training
    _assert_within_bound(training)
    (loss,) = logged_losses(out)
    assert abs(loss - math.log(2)) > 1e-6, loss


@pytest.mark.parametrize("alpha, passed", [(None, None), (0, None), (0.0, None), (5, 5.0), (0.5, 0.5)])
def test_the_option_reaches_training_arguments(alpha, passed, tmp_path):
    cfg = load_config(None, {"model_name_or_path": "m", "output_dir": str(tmp_path), "neftune_noise_alpha": alpha})
    assert training_arguments_kwargs(cfg, [])["neftune_noise_alpha"] == passed
