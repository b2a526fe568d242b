"""ASFT (use_asft_loss, asft_alpha): the formula (train/losses.py: sft_token_losses) against a hand computation on a
tiny batch, and through tunekit train with both references (full: a frozen copy; LoRA: the disabled adapter)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.helpers import alpaca_records, base_config, logged_losses, write_dataset
from tunekit.config import load_config
from tunekit.train.losses import sft_token_losses

# Two positions over a 3-token vocabulary, targets 0 and 2; the reference differs from the policy at both.
LOGITS = [[2.0, 0.0, -1.0], [0.5, 0.5, 0.5]]
REF_LOGITS = [[1.0, 1.0, 0.0], [0.0, 2.0, -1.0]]
TARGETS = [0, 2]


def _softmax(row):
    z = sum(math.exp(v) for v in row)
    return [math.exp(v) / z for v in row]


def _by_hand(alpha: float) -> list[float]:
    """LLaMA-Factory's _asft_cross_entropy, per token: p(y)·CE + alpha · Σ_v q_v (log q_v - log p_v)."""
    out = []
    for row, ref, t in zip(LOGITS, REF_LOGITS, TARGETS):
        p, q = _softmax(row), _softmax(ref)
        ce = -math.log(p[t])
        kl = sum(qv * (math.log(qv) - math.log(pv)) for pv, qv in zip(p, q))
        out.append(p[t] * ce + alpha * kl)
    return out


@pytest.mark.parametrize("alpha", [0.1, 1.0])
def test_asft_token_losses_equal_the_hand_computation(alpha):
    # float64 on both sides: the only difference is summation order, ~1e-16 relative.
    logits = torch.tensor(LOGITS, dtype=torch.float64, requires_grad=True)
    ref = torch.tensor(REF_LOGITS, dtype=torch.float64)
    got = sft_token_losses(logits, torch.tensor(TARGETS), "asft", alpha, ref)
    assert got.tolist() == pytest.approx(_by_hand(alpha), rel=1e-12, abs=0)
    # the DFT weight p(y) carries no gradient, the KL term does: dL/dz = p(y)·(p - onehot) + alpha·(p - q)
    got.sum().backward()
    p, q = torch.softmax(logits.detach(), -1), torch.softmax(ref, -1)
    onehot = torch.nn.functional.one_hot(torch.tensor(TARGETS), 3).double()
    w = p[[0, 1], TARGETS]
    assert torch.allclose(logits.grad, w[:, None] * (p - onehot) + alpha * (p - q), rtol=1e-12, atol=0)


def test_asft_equals_dft_when_the_reference_is_the_policy():
    logits = torch.tensor(LOGITS, dtype=torch.float64)
    asft = sft_token_losses(logits, torch.tensor(TARGETS), "asft", 0.5, logits.clone())
    dft = sft_token_losses(logits, torch.tensor(TARGETS), "dft")
    assert asft.tolist() == pytest.approx(dft.tolist(), rel=1e-12, abs=1e-15)


def test_asft_without_reference_logits_is_an_error():
    with pytest.raises(ValueError, match="needs the reference's logits"):
        sft_token_losses(torch.zeros(1, 3), torch.tensor([0]), "asft", 0.1)


def _moved(out, start) -> float:
    """Distance of the trained weights from where they started (the LoRA adapter: from B = 0, i.e. its norm)."""
    from safetensors.torch import load_file

    if (out / "adapter_model.safetensors").is_file():
        return sum(
            float(t.float().norm() ** 2)
            for k, t in load_file(out / "adapter_model.safetensors").items()
            if "lora_B" in k
        )
    trained = load_file(out / "model.safetensors")
    return sum(float((trained[k].float() - t.float()).norm() ** 2) for k, t in start.items() if k in trained)


@pytest.mark.parametrize("finetuning_type, trained_tokens_loss", [("full", True), ("full", False), ("lora", True)])
def test_asft_trains_against_its_reference(finetuning_type, trained_tokens_loss, tiny_qwen, tmp_path):
    from safetensors.torch import load_file

    from tunekit.flow import run_train

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(8))
    logs, moved = {}, {}
    start = load_file(tiny_qwen / "model.safetensors")
    for name, extra in (("dft", {"use_dft_loss": True}), ("asft", {"use_asft_loss": True, "asft_alpha": 1.0})):
        out = tmp_path / name
        run_train(
            load_config(
                None,
                base_config(
                    tiny_qwen,
                    data,
                    out,
                    max_steps=6,
                    finetuning_type=finetuning_type,
                    trained_tokens_loss=trained_tokens_loss,
                    **extra,
                ),
            )
        )
        logs[name], moved[name] = logged_losses(out), _moved(out, start)
    # step 1: the policy is still the reference (a frozen copy / the adapter's B = 0), so KL = 0 and ASFT's loss is
    # DFT's. Same weights, same batch; only float32 reduction order may differ (the reference forward adds none here).
    assert logs["asft"][0] == pytest.approx(logs["dft"][0], rel=1e-6)
    # later steps: the KL term is active, and it anchors the weights:
    # they train, but stay nearer the reference than DFT's
    assert logs["asft"][1:] != pytest.approx(logs["dft"][1:], rel=1e-6)
    assert 0 < moved["asft"] < moved["dft"]


def test_planner_counts_the_reference_copy(tiny_qwen):
    """Full fine-tuning with ASFT holds a frozen copy of the model (fp32 here: 4 bytes a parameter); LoRA none."""
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.memory import estimate_memory
    from tunekit.plan.training_setup import resolve_setup

    shape = load_shape(str(tiny_qwen), None)

    def base(**options):
        cfg = load_config(None, {"model_name_or_path": str(tiny_qwen), "stage": "sft", "use_cpu": True, **options})
        return estimate_memory(shape, resolve_setup(cfg)).components["base_weights"]

    assert (
        base(finetuning_type="full", use_asft_loss=True) - base(finetuning_type="full", use_dft_loss=True)
        == 4 * shape.total_params
    )
    assert base(finetuning_type="lora", use_asft_loss=True) == base(finetuning_type="lora", use_dft_loss=True)
