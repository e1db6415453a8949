"""Munchausen DQN's target against its formula, written out per sample."""

from __future__ import annotations

import math

import pytest
import torch

from sampleforge.algo.munchausen import munchausen_targets, soft_log_policy


def test_soft_log_policy_is_log_softmax_and_stable():
    q = torch.tensor([[1000.0, 999.0, -1000.0]])
    got = soft_log_policy(q, tau=0.03)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, torch.log_softmax(q / 0.03, dim=1))


def test_munchausen_targets_match_the_formula():
    g = torch.Generator().manual_seed(0)
    B, A, tau, alpha, l0 = 16, 4, 0.03, 0.9, -1.0
    target_q = torch.randn(B, A, generator=g, dtype=torch.float64)
    next_q = torch.randn(B, A, generator=g, dtype=torch.float64)
    rewards = torch.randn(B, generator=g, dtype=torch.float64)
    discounts = torch.full((B,), 0.99, dtype=torch.float64)
    discounts[::4] = 0.0
    actions = torch.randint(A, (B,), generator=g)
    got = munchausen_targets(
        rewards=rewards,
        discounts=discounts,
        actions=actions,
        target_q=target_q,
        next_target_q=next_q,
        tau=tau,
        alpha=alpha,
        log_policy_clip=l0,
    )
    for i in range(B):
        z = [math.exp(v / tau) for v in (target_q[i] - target_q[i].max()).tolist()]
        log_pi_a = math.log(z[int(actions[i])] / sum(z))
        bonus = min(max(tau * log_pi_a, l0), 0.0)
        zn = [math.exp(v / tau) for v in (next_q[i] - next_q[i].max()).tolist()]
        pn = [v / sum(zn) for v in zn]
        soft = sum(p * (q - tau * math.log(p)) for p, q in zip(pn, next_q[i].tolist()) if p > 0)
        expected = float(rewards[i]) + alpha * bonus + float(discounts[i]) * soft
        assert float(got[i]) == pytest.approx(expected, abs=1e-9)


def test_alpha_zero_and_small_tau_give_the_dqn_target():
    g = torch.Generator().manual_seed(1)
    next_q = torch.randn(8, 3, generator=g, dtype=torch.float64)
    rewards = torch.randn(8, generator=g, dtype=torch.float64)
    got = munchausen_targets(
        rewards=rewards,
        discounts=torch.full((8,), 0.9, dtype=torch.float64),
        actions=torch.zeros(8, dtype=torch.long),
        target_q=torch.randn(8, 3, generator=g, dtype=torch.float64),
        next_target_q=next_q,
        tau=1e-4,
        alpha=0.0,
        log_policy_clip=-1.0,
    )
    torch.testing.assert_close(got, rewards + 0.9 * next_q.max(dim=1).values, atol=1e-3, rtol=0)
