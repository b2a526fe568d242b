"""DPO and its loss family on a tiny model: exact step-0 values, hand-checked log-probs, the LoRA
reference without a second copy, learning on a synthetic preference task, accumulation and resume."""

from __future__ import annotations

import gc
import math
import shutil
from pathlib import Path

import pytest
import torch

from tests.helpers import base_config, train_rows
from tests.stage_helpers import write_preference
from tests.tolerances import FP32_U
from tunekit.config import load_config
from tunekit.flow import run_train


@pytest.fixture(scope="module")
def pref_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prefdata")
    write_preference(folder, "toy", n=32, seed=0)
    write_preference(folder, "held", n=16, seed=1)
    return folder


def _cfg(model, data_dir, out, **overrides):
    return load_config(None, base_config(model, data_dir, out, stage="dpo", **overrides))


def _build(cfg):
    """What run_train builds, kept in hand: (trainer, batch of the first 4 pairs)."""
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.stages import dpo

    tokenizer = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tokenizer, "dpo")
    model = load_model(cfg, tokenizer)
    trainer = dpo.build_trainer(cfg, build_training_arguments(cfg, []), model, tokenizer, data, [])
    batch = trainer.data_collator([data.train[i] for i in range(4)])
    return trainer, batch


@pytest.mark.parametrize("method", ["lora", "full"])
def test_step0_losses_are_exact_and_logps_match_a_hand_computation(tiny_qwen, pref_dir, tmp_path, method):
    from transformers import AutoModelForCausalLM

    cfg = _cfg(tiny_qwen, pref_dir, tmp_path / "o", finetuning_type=method, dtype="float64")  # float64: see below
    trainer, batch = _build(cfg)
    model = trainer.model.train()  # as in a training step (the metrics are filed under "train")
    expected = {"sigmoid": math.log(2), "hinge": 1.0, "ipo": 1 / (4 * 0.1**2)}
    for kind, value in expected.items():
        trainer.tunekit_config = cfg.model_copy(update={"pref_loss": kind})
        loss = trainer.compute_loss(model, batch)
        # step 0: policy and reference are the same weights through the same operations (a zero LoRA B, or a copy),
        # so the margin is exactly 0 and only the evaluation of the formula at 0 rounds (a few float32 ulps at most)
        assert loss.item() == pytest.approx(value, rel=8 * FP32_U), kind
        metrics = trainer._metrics["train"]
        assert metrics["rewards/chosen"][-1] == 0.0 and metrics["rewards/rejected"][-1] == 0.0, kind
        assert metrics["rewards/accuracies"][-1] == 0.0  # ties are not "correct"
    # per-sample log-prob sums vs a hand computation with plain transformers over the labelled tokens
    from tunekit.train.stages.dpo import forward_logps

    # In float64 (model and hand computation): the batched, padded forward and the single-sequence one differ only in
    # rounding, ~1e-13 on each of the <= 64 summed log-probs of ~-10; 1e-9 is far below a shifted label or a
    # token counted twice (~1 nat).
    tol = 1e-9
    plain = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float64).eval()
    with torch.no_grad():
        ours, _ = forward_logps(model, batch["input_ids"], batch["attention_mask"], batch["token_labels"])
        ref = trainer.reference_logps(model, batch)
        assert ours.dtype == ref.dtype == torch.float64
        for row in (0, 5):  # a chosen and a rejected sequence
            n = int(batch["attention_mask"][row].sum())
            ids, labels = batch["input_ids"][row, :n], batch["token_labels"][row, :n]
            logp = torch.log_softmax(plain(ids[None]).logits[0], -1)
            hand = sum(logp[t - 1, ids[t]].item() for t in range(1, n) if labels[t] != -100)
            assert ours[row].item() == pytest.approx(hand, abs=tol)
            assert ref[row].item() == pytest.approx(hand, abs=tol)


def test_lora_reference_is_the_base_model_without_a_second_copy(tiny_qwen, pref_dir, tmp_path):
    from transformers import AutoModelForCausalLM, PreTrainedModel

    cfg = _cfg(tiny_qwen, pref_dir, tmp_path / "o", learning_rate=2e-2, max_steps=3)
    gc.collect()
    earlier = {id(o) for o in gc.get_objects() if isinstance(o, PreTrainedModel)}  # other tests' models may still live
    trainer, batch = _build(cfg)
    assert trainer.ref_model is None
    gc.collect()
    # every model built for this run shares the policy's own tensors: no second copy anywhere
    alive = {
        p.data_ptr()
        for o in gc.get_objects()
        if isinstance(o, PreTrainedModel) and id(o) not in earlier
        for p in o.parameters()
    }
    assert alive == {p.data_ptr() for p in trainer.model.parameters()}
    base_params = sum(p.numel() for p in AutoModelForCausalLM.from_config(trainer.model.config).parameters())
    lora_params = sum(p.numel() for n, p in trainer.model.named_parameters() if "lora_" in n)
    assert sum(p.numel() for p in trainer.model.parameters()) == base_params + lora_params
    trainer.train()
    plain = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = trainer.reference_logps(trainer.model, batch)
        from tunekit.train.losses import sequence_logps

        base = sequence_logps(
            plain(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits, batch["token_labels"]
        )[0]
        from tunekit.train.stages.dpo import forward_logps

        policy = forward_logps(trainer.model, batch["input_ids"], batch["attention_mask"], batch["token_labels"])[0]
    # the disabled adapter runs exactly the base layers on the same batch shapes as the plain model: the same
    # operations, so equal up to nothing on one machine; 1e-4 is two orders below how far the trained policy
    # moved (> 1e-2)
    assert torch.allclose(ref, base, atol=1e-4), (ref - base).abs().max()
    assert (policy - base).abs().max() > 1e-2  # the adapter learned something, the reference did not move


@pytest.mark.parametrize(
    "loss, extra, gain",
    [
        ("sigmoid", {"learning_rate": 5e-3}, 0.3),
        (
            "orpo",
            {"learning_rate": 5e-3},
            0.01,
        ),  # orpo's rewards are 0.1 x mean token log-prob: small numbers (0.02 gained)
        ("simpo", {"learning_rate": 5e-3, "pref_beta": 2.0}, 0.3),
    ],
)
def test_reward_accuracy_rises_on_a_synthetic_preference_task(tiny_qwen, pref_dir, tmp_path, loss, extra, gain):
    out = tmp_path / "out"
    results = run_train(
        _cfg(
            tiny_qwen,
            pref_dir,
            out,
            pref_loss=loss,
            max_steps=10,
            eval_dataset="held",
            do_train=True,
            do_eval=True,
            per_device_eval_batch_size=8,
            **extra,
        )
    )
    rows = train_rows(out)
    assert len(rows) == 10
    accs = [r["rewards/accuracies"] for r in rows]
    margins = [r["rewards/margins"] for r in rows]
    assert sum(accs[-3:]) / 3 >= 0.9, accs
    assert margins[-1] > max(margins[0], 0) + gain, margins
    assert results["eval_rewards/accuracies"] >= 0.9, results  # held-out pairs
    assert {"rewards/chosen", "rewards/rejected", "logps/chosen", "logps/rejected"} <= set(rows[0])
    if loss == "sigmoid":
        # step 0: zero margin exactly (same weights, same operations); the Trainer logs it through float32 (ulp 6e-8)
        assert rows[0]["loss"] == pytest.approx(math.log(2), abs=1e-5) and rows[0]["rewards/margins"] == 0.0
        assert rows[-1]["loss"] < 0.6
    assert (out / "adapter_model.safetensors").is_file()


def test_gradient_accumulation_and_precomputed_reference_are_equivalent(tiny_qwen, pref_dir, tmp_path):
    # float64: in float32, Adam makes reduction-order differences at the rounding floor into steps of up to lr, so the
    # losses after step 1 would depend on the machine (tests/tolerances.py). In float64 the three runs differ by
    # ~1e-13 relative; 1e-7 still leaves room for the Trainer's float32 loss accumulator (ulp of ~0.7: 6e-8) and is
    # far below what a mis-scaled accumulation or a wrong reference does (~1e-2).
    common = dict(max_steps=3, learning_rate=1e-2, gradient_checkpointing=False, pref_ftx=0.5, dtype="float64")
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    run_train(_cfg(tiny_qwen, pref_dir, a, per_device_train_batch_size=1, gradient_accumulation_steps=4, **common))
    run_train(_cfg(tiny_qwen, pref_dir, b, per_device_train_batch_size=4, gradient_accumulation_steps=1, **common))
    run_train(_cfg(tiny_qwen, pref_dir, c, per_device_train_batch_size=4, precompute_ref_log_probs=True, **common))
    la, lb, lc = ([r["loss"] for r in train_rows(p)] for p in (a, b, c))
    assert la == pytest.approx(lb, abs=1e-6) and lc == pytest.approx(lb, abs=1e-6), (la, lb, lc)
    ma, mb = ([r["rewards/margins"] for r in train_rows(p)] for p in (a, b))
    assert ma == pytest.approx(mb, abs=1e-6)
    assert "loss/sft" in train_rows(b)[0]


def _adapter(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(path / "adapter_model.safetensors")


def test_resume_matches_the_uninterrupted_run_and_the_adapter_reloads(tiny_qwen, pref_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    full, resumed = tmp_path / "full", tmp_path / "resumed"
    common = dict(
        max_steps=6,
        save_strategy="steps",
        save_steps=3,
        per_device_train_batch_size=3,
        learning_rate=5e-3,
        lr_scheduler_type="cosine",
        warmup_steps=1,
    )
    run_train(_cfg(tiny_qwen, pref_dir, full, **common))
    resumed.mkdir()
    shutil.copytree(full / "checkpoint-3", resumed / "checkpoint-3")
    run_train(_cfg(tiny_qwen, pref_dir, resumed, resume_from_checkpoint=True, **common))
    assert [r["step"] for r in train_rows(resumed)] == [4, 5, 6]
    # one machine, the same operations in the same order (states restored bit for bit): no cross-machine rounding
    assert [r["loss"] for r in train_rows(resumed)] == pytest.approx(
        [r["loss"] for r in train_rows(full)][3:], abs=1e-6
    )
    wa, wb = _adapter(full), _adapter(resumed)
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-6
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_qwen), full)
    ids = torch.tensor([[5, 17, 99, 23]])
    with torch.no_grad(), model.disable_adapter():
        base = model(ids).logits
    assert (model(ids).logits - base).abs().max() > 1e-4
