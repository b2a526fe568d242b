"""DFT and EAFT losses (train/losses.py: sft_token_losses) against a hand computation on a tiny batch, and through
tunekit train on both loss paths (LM head on trained tokens only, and full logits). ASFT:
tests/train/test_asft_loss.py."""

from __future__ import annotations

import math

import pytest
import torch

from tests.helpers import alpaca_records, base_config, logged_losses, write_dataset
from tunekit.config import load_config
from tunekit.train.losses import sft_token_losses

# Two positions over a 3-token vocabulary, targets 0 and 2 (eaft uses the top-20, i.e. all three here).
LOGITS = [[2.0, 0.0, -1.0], [0.5, 0.5, 0.5]]
TARGETS = [0, 2]


def _by_hand(kind: str, alpha: float = 1.0) -> list[float]:
    out = []
    for row, t in zip(LOGITS, TARGETS):
        z = sum(math.exp(v) for v in row)
        p = [math.exp(v) / z for v in row]
        ce = -math.log(p[t])
        w = p[t] if kind == "dft" else (-sum(q * math.log(q) for q in p) / 3.0) ** alpha
        out.append(w * ce)
    return out


@pytest.mark.parametrize("kind, alpha", [("dft", 1.0), ("eaft", 1.0), ("eaft", 2.0)])
def test_token_losses_equal_the_hand_computation(kind, alpha):
    # float64 on both sides: the only difference is summation order, ~1e-16 relative.
    logits = torch.tensor(LOGITS, dtype=torch.float64, requires_grad=True)
    got = sft_token_losses(logits, torch.tensor(TARGETS), kind, alpha)
    assert got.tolist() == pytest.approx(_by_hand(kind, alpha), rel=1e-12, abs=0)
    # the weight carries no gradient: d(w·CE)/dz = w · (softmax - onehot)
    got.sum().backward()
    p = torch.softmax(logits.detach(), -1)
    onehot = torch.nn.functional.one_hot(torch.tensor(TARGETS), 3).double()
    w = torch.tensor(_by_hand(kind, alpha), dtype=torch.float64) / -torch.log(p[[0, 1], TARGETS])
    assert torch.allclose(logits.grad, w[:, None] * (p - onehot), rtol=1e-12, atol=0)


def test_uniform_position_has_entropy_weight_ln3_over_3():
    # Known value: a uniform distribution over 3 tokens has entropy ln 3, so the EAFT weight is ln(3)/3.
    ce = math.log(3)
    got = sft_token_losses(torch.tensor([[0.5, 0.5, 0.5]], dtype=torch.float64), torch.tensor([2]), "eaft", 1.0)
    assert got.item() == pytest.approx(math.log(3) / 3 * ce, rel=1e-12)


@pytest.mark.parametrize("trained_tokens_loss", [True, False])
def test_dft_loss_trains_and_logs_the_weighted_loss(trained_tokens_loss, tiny_qwen, tmp_path):
    from tunekit.flow import run_train

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(8))
    logs = {}
    for name, extra in (("plain", {}), ("dft", {"use_dft_loss": True})):
        out = tmp_path / name
        run_train(
            load_config(
                None, base_config(tiny_qwen, data, out, max_steps=2, trained_tokens_loss=trained_tokens_loss, **extra)
            )
        )
        logs[name] = logged_losses(out)
    # step 1 sees the same weights: DFT's loss is Σ p_t·CE_t / N < Σ CE_t / N (every p_t < 1), and positive
    assert 0 < logs["dft"][0] < logs["plain"][0]
