"""KTO on desirable/undesirable examples: step-0 values, learning, and the reference's KL estimate."""

from __future__ import annotations

import pytest

from tests.helpers import base_config, train_rows
from tests.stage_helpers import write_kto
from tunekit.config import load_config
from tunekit.flow import run_train


@pytest.fixture(scope="module")
def kto_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ktodata")
    write_kto(folder, "toy", n=32, seed=0)
    return folder


def test_kto_learns_desirable_from_undesirable(tiny_qwen, kto_dir, tmp_path):
    out = tmp_path / "out"
    run_train(
        load_config(
            None,
            base_config(
                tiny_qwen,
                kto_dir,
                out,
                stage="kto",
                max_steps=8,
                learning_rate=5e-3,
                kto_chosen_weight=1.0,
                kto_rejected_weight=1.33,
            ),
        )
    )
    rows = train_rows(out)
    first = rows[0]
    # step 0: policy = reference, so every reward and the KL estimate are exactly 0 and the loss is 1 - sigma(0)
    assert first["rewards/chosen"] == 0.0 and first["rewards/rejected"] == 0.0 and first["kto/kl"] == 0.0
    assert first["rewards/accuracies"] == 0.0
    accs = [r["rewards/accuracies"] for r in rows]
    assert sum(accs[-3:]) / 3 >= 0.9, accs
    assert rows[-1]["rewards/chosen"] > 0 > rows[-1]["rewards/rejected"]
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_qwen), out)  # the adapter reloads
    assert any("lora_B" in n and p.abs().sum() > 0 for n, p in model.named_parameters())


def test_kto_precomputed_reference_matches(tiny_qwen, kto_dir, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    # float64: the reference log-probs of the two runs come from different passes (rounding differences only), which
    # Adam would turn into machine-dependent steps of up to lr in float32 (tests/tolerances.py). In float64 the losses
    # agree to ~1e-13; 1e-6 leaves room for the Trainer's float32 loss accumulator (ulp of ~0.5: 6e-8) and is far below
    # a wrong reference (~1e-2).
    common = dict(stage="kto", max_steps=2, learning_rate=1e-2, gradient_checkpointing=False, dtype="float64")
    run_train(load_config(None, base_config(tiny_qwen, kto_dir, a, **common)))
    run_train(load_config(None, base_config(tiny_qwen, kto_dir, b, precompute_ref_log_probs=True, **common)))
    la, lb = ([r["loss"] for r in train_rows(p)] for p in (a, b))
    assert la == pytest.approx(lb, abs=1e-6)
