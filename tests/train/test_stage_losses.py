"""The stage losses against their formulas: known initial values, hand-computed log-probs, GAE, group advantages.

Tolerances: each loss is a handful of float32 operations (log, exp, sigmoid, a few sums) on values of order 1..20,
compared with the same formula in Python's float64; every float32 operation rounds by at most 2**-24 relative, so a
chain of <= 8 of them on values up to ~20 stays within 8 * 20 * 2**-24 = 9.5e-6 (atol 1e-5), and within 1e-6 where the
values are of order 1 (pytest.approx's default rel=1e-6 is the same argument). A wrong formula (a sign, a missing beta,
a swapped pair) is off by > 1e-2.
"""

from __future__ import annotations

import math

import pytest
import torch

from tunekit.train.losses import (
    gae,
    group_advantages,
    grpo_loss,
    kto_loss,
    pairwise_reward_loss,
    ppo_losses,
    preference_loss,
    sequence_logps,
)


def _pairs(policy_equal_ref: bool = True):
    torch.manual_seed(0)
    pc, pr = -torch.rand(4) * 20, -torch.rand(4) * 20
    rc, rr = (pc.clone(), pr.clone()) if policy_equal_ref else (pc - 1, pr + 1)
    return pc, pr, rc, rr, torch.tensor([5.0, 6, 7, 8]), torch.tensor([4.0, 6, 9, 3])


@pytest.mark.parametrize(
    "kind, beta, expected",
    [
        ("sigmoid", 0.1, math.log(2)),
        ("sigmoid", 2.0, math.log(2)),
        ("hinge", 0.1, 1.0),
        ("ipo", 0.1, 25.0),
        ("ipo", 0.5, 1.0),
    ],
)
def test_initial_values_when_policy_equals_reference(kind, beta, expected):
    pc, pr, rc, rr, nc, nr = _pairs()
    out = preference_loss(kind, beta, pc, pr, rc, rr, nc, nr)
    assert torch.allclose(out.losses, torch.full((4,), expected), atol=1e-6)
    assert torch.equal(out.chosen_rewards, torch.zeros(4)) and torch.equal(out.rejected_rewards, torch.zeros(4))


def test_sigmoid_label_smoothing_and_values():
    pc, pr, rc, rr, nc, nr = _pairs(policy_equal_ref=False)  # h = 2 for every pair
    out = preference_loss("sigmoid", 0.5, pc, pr, rc, rr, nc, nr, label_smoothing=0.2)
    expected = -0.8 * math.log(1 / (1 + math.exp(-1.0))) - 0.2 * math.log(1 / (1 + math.exp(1.0)))
    assert torch.allclose(out.losses, torch.full((4,), expected), atol=1e-6)
    assert torch.allclose(out.chosen_rewards, torch.full((4,), 0.5)) and torch.allclose(
        out.rejected_rewards, torch.full((4,), -0.5)
    )
    hinge = preference_loss("hinge", 0.25, pc, pr, rc, rr, nc, nr)
    assert torch.allclose(hinge.losses, torch.full((4,), 0.5))


def test_orpo_and_simpo_formulas():
    pc, pr, _, _, nc, nr = _pairs()
    lw, ll = pc / nc, pr / nr
    simpo = preference_loss("simpo", 2.0, pc, pr, None, None, nc, nr, simpo_gamma=0.5)
    assert torch.allclose(simpo.losses, -torch.nn.functional.logsigmoid(2.0 * (lw - ll) - 0.5))
    orpo = preference_loss("orpo", 0.1, pc, pr, None, None, nc, nr)
    odds = lambda label: label - torch.log(1 - torch.exp(label))  # noqa: E731
    assert torch.allclose(orpo.losses, -lw - 0.1 * torch.nn.functional.logsigmoid(odds(lw) - odds(ll)), atol=1e-5)
    with pytest.raises(ValueError, match="needs reference"):
        preference_loss("sigmoid", 0.1, pc, pr, None, None, nc, nr)


def test_sequence_logps_is_the_sum_over_labelled_tokens():
    torch.manual_seed(1)
    logits = torch.randn(2, 6, 11)
    labels = torch.tensor([[-100, -100, 3, 4, 5, -100], [-100, 7, 8, 9, 10, 2]])
    total, count = sequence_logps(logits, labels)
    for row in range(2):
        hand = sum(
            torch.log_softmax(logits[row, t - 1], -1)[labels[row, t]].item()
            for t in range(1, 6)
            if labels[row, t] != -100
        )
        assert total[row].item() == pytest.approx(hand, abs=1e-5)
    assert count.tolist() == [3, 5]


def test_reward_and_kto_losses():
    assert pairwise_reward_loss(torch.tensor([1.0]), torch.tensor([1.0])).item() == pytest.approx(math.log(2))
    policy, ref = torch.tensor([-3.0, -3.0]), torch.tensor([-4.0, -2.0])
    desirable = torch.tensor([True, False])
    losses, rewards = kto_loss(policy, ref, desirable, torch.tensor(-0.5), beta=1.0, desirable_weight=2.0)
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    assert losses.tolist() == pytest.approx([2 * (1 - sig(1.0)), 1 - sig(1.0)])  # z0 = max(0, -0.5) = 0
    assert rewards.tolist() == pytest.approx([1.0, -1.0])


def test_gae_matches_the_recursion():
    rewards = torch.tensor([[0.0, 0.5, 1.0, 0.0]])
    values = torch.tensor([[0.2, 0.1, 0.3, 9.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    d2 = 1.0 - 0.3
    d1 = 0.5 + 0.9 * 0.3 - 0.1
    d0 = 0.0 + 0.9 * 0.1 - 0.2
    a2, a1 = d2, d1 + 0.72 * d2
    a0 = d0 + 0.72 * a1
    assert adv[0].tolist() == pytest.approx([a0, a1, a2, 0.0], abs=1e-6)
    assert ret[0, :3].tolist() == pytest.approx([a0 + 0.2, a1 + 0.1, a2 + 0.3], abs=1e-6)


def test_ppo_clipping_and_group_advantages():
    adv = torch.tensor([[1.0, -1.0]])
    old = torch.zeros(1, 2)
    new = torch.log(torch.tensor([[1.5, 0.5]]))  # ratios 1.5 and 0.5, clip 0.2
    parts = ppo_losses(
        new, old, adv, torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2), 0.2, 0.2
    )
    # token 0: max(-1.5, -1.2) = -1.2; token 1: max(0.5, 0.8) = 0.8
    assert parts["policy_loss"].item() == pytest.approx((-1.2 + 0.8) / 2)
    assert parts["value_loss"].item() == pytest.approx(0.5)
    a = group_advantages(torch.tensor([1.0, 0.0, 2.0, 2.0]), 2)
    assert a[2:].abs().max() < 1e-6 and a[0] > 0 > a[1]
    losses, kl = grpo_loss(
        torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), torch.tensor([1.0, -1.0]), torch.ones(2, 3), 0.1, 0.2
    )
    assert losses.tolist() == pytest.approx([-1.0, 1.0]) and kl.abs().max() == 0
