"""The continuous-control losses (DDPG, TD3, SAC, CrossQ) against their formulas written out per
sample in float64, their gradients against autograd's, and the replay's n-step targets for
float (Box) actions against a direct loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sampleforge.algo.continuous_control import (
    critic_loss,
    critic_targets,
    default_target_entropy,
    deterministic_actor_loss,
    sac_actor_loss,
    smoothed_target_actions,
    soft_bootstrap,
    squashed_gaussian_log_prob,
    squashed_gaussian_sample,
    temperature_loss,
)
from sampleforge.buffers.replay import ReplayBuffer
from sampleforge.spaces import TensorSpec

F64 = torch.float64


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


# --------------------------------------------------------------------------- the policy


def test_squashed_gaussian_log_prob_matches_the_density_times_the_tanh_jacobian():
    u, mean, log_std = _randn(6, 3, seed=0) * 2, _randn(6, 3, seed=1), _randn(6, 3, seed=2) / 2
    got = squashed_gaussian_log_prob(u, mean, log_std)
    assert got.shape == (6,)
    for b in range(6):
        expected = 0.0
        for i in range(3):
            x, m, std = float(u[b, i]), float(mean[b, i]), math.exp(float(log_std[b, i]))
            density = math.exp(-0.5 * ((x - m) / std) ** 2) / (std * math.sqrt(2 * math.pi))
            expected += math.log(density) - math.log(1 - math.tanh(x) ** 2)
        assert float(got[b]) == pytest.approx(expected, abs=1e-9)


def test_squashed_gaussian_log_prob_stays_finite_where_tanh_rounds_to_one():
    u = torch.tensor([[20.0, -20.0], [35.0, -100.0]])  # tanh(u) is exactly +-1 in float32
    mean, log_std = torch.zeros(2, 2), torch.full((2, 2), 3.0)
    got = squashed_gaussian_log_prob(u, mean, log_std)
    assert torch.isfinite(got).all()
    # log(1 - tanh(x)^2) = log 4 - 2|x| - 2 log(1 + exp(-2|x|)): sech^2 written out.
    for b in range(2):
        expected = 0.0
        for x in u[b].tolist():
            log_normal = -0.5 * (x / math.exp(3.0)) ** 2 - 3.0 - 0.5 * math.log(2 * math.pi)
            log_sech2 = math.log(4) - 2 * abs(x) - 2 * math.log1p(math.exp(-2 * abs(x)))
            expected += log_normal - log_sech2
        assert float(got[b]) == pytest.approx(expected, rel=1e-6)


def test_the_sample_is_tanh_of_mean_plus_std_eps_with_its_log_prob():
    mean, log_std = _randn(64, 2, seed=3), _randn(64, 2, seed=4) / 2
    actions, log_prob = squashed_gaussian_sample(mean, log_std, torch.Generator().manual_seed(7))
    eps = torch.randn(64, 2, generator=torch.Generator().manual_seed(7), dtype=F64)
    u = mean + log_std.exp() * eps
    assert actions.shape == (64, 2) and log_prob.shape == (64,)
    assert (actions.abs() < 1).all()
    torch.testing.assert_close(actions, torch.tanh(u), rtol=0, atol=1e-12)
    torch.testing.assert_close(log_prob, squashed_gaussian_log_prob(u, mean, log_std))


def test_the_sample_is_reparameterised_so_gradients_reach_mean_and_log_std():
    mean = _randn(8, 2, seed=5).requires_grad_()
    log_std = (_randn(8, 2, seed=6) / 2).requires_grad_()
    actions, _ = squashed_gaussian_sample(mean, log_std, torch.Generator().manual_seed(1))
    actions.sum().backward()
    eps = torch.randn(8, 2, generator=torch.Generator().manual_seed(1), dtype=F64)
    with torch.no_grad():
        u = mean + log_std.exp() * eps
        dtanh = 1 - torch.tanh(u) ** 2
    assert mean.grad is not None and log_std.grad is not None
    torch.testing.assert_close(mean.grad, dtanh)  # d tanh(u) / d mean
    torch.testing.assert_close(log_std.grad, dtanh * log_std.exp() * eps)  # ... / d log_std


def test_target_smoothing_clips_the_noise_then_the_action():
    actions = torch.linspace(-1, 1, 201, dtype=F64).reshape(-1, 1).repeat(1, 3)
    g = torch.Generator().manual_seed(0)
    smoothed = smoothed_target_actions(actions, noise_std=1e6, noise_clip=0.3, generator=g)
    assert (smoothed >= -1).all() and (smoothed <= 1).all()
    # The noise is clipped before the action: every shift is at most the clip, and with so
    # large a std every action that has room moves by exactly the clip.
    shift = (smoothed - actions).abs()
    assert (shift <= 0.3 + 1e-12).all()
    inside = actions.abs() <= 0.7
    torch.testing.assert_close(shift[inside], torch.full_like(shift[inside], 0.3))
    # ... in both directions.
    moved = (smoothed - actions)[inside]
    assert (moved > 0).any() and (moved < 0).any()


def test_target_smoothing_with_zero_std_is_the_identity_and_bad_settings_are_refused():
    actions = _randn(5, 2, seed=8).tanh()
    assert smoothed_target_actions(actions, 0.0, 0.5) is actions
    small = smoothed_target_actions(actions, 0.1, 0.5, torch.Generator().manual_seed(0))
    eps = torch.randn(5, 2, generator=torch.Generator().manual_seed(0), dtype=F64)
    torch.testing.assert_close(small, (actions + (0.1 * eps).clamp(-0.5, 0.5)).clamp(-1, 1))
    with pytest.raises(ValueError, match="noise_std must be >= 0, got -0.1"):
        smoothed_target_actions(actions, -0.1, 0.5)
    with pytest.raises(ValueError, match="noise_clip must be >= 0, got -1"):
        smoothed_target_actions(actions, 0.1, -1.0)


# --------------------------------------------------------------------------- the critics


def test_soft_bootstrap_takes_the_min_of_the_critics_less_alpha_log_prob():
    next_q, log_prob = _randn(2, 10, seed=9), _randn(10, seed=10)
    got = soft_bootstrap(next_q, log_prob, torch.tensor(0.2, dtype=F64))
    for b in range(10):
        expected = min(float(next_q[0, b]), float(next_q[1, b])) - 0.2 * float(log_prob[b])
        assert float(got[b]) == pytest.approx(expected, abs=1e-12)
    # No log-prob (DDPG, TD3): the min alone; one critic (DDPG): that critic.
    torch.testing.assert_close(soft_bootstrap(next_q, None, 0.2), next_q.min(dim=0).values)
    torch.testing.assert_close(soft_bootstrap(next_q[:1], None, 0.0), next_q[0])
    with pytest.raises(ValueError, match=r"next_q must be \[K, B\]"):
        soft_bootstrap(next_q[0], None, 0.0)


def test_critic_targets_bootstrap_after_a_truncation_but_not_after_a_termination():
    returns = torch.tensor([1.0, 2.0, 0.5], dtype=F64)
    discounts = torch.tensor([0.0, 0.9**2, 0.9], dtype=F64)  # terminated, truncated, running
    bootstrap = torch.tensor([1e6, 10.0, -4.0], dtype=F64, requires_grad=True)
    y = critic_targets(returns, discounts, bootstrap)
    assert not y.requires_grad  # a constant
    assert y.tolist() == pytest.approx([1.0, 2.0 + 0.81 * 10.0, 0.5 - 0.9 * 4.0])
    with pytest.raises(ValueError, match=r"bootstrap must have shape \(3,\), got \(3, 1\)"):
        critic_targets(returns, discounts, bootstrap[:, None])


def test_critic_loss_matches_a_per_sample_loop_with_weights_and_priorities():
    k, b = 2, 12
    q = _randn(k, b, seed=11).requires_grad_()
    targets = _randn(b, seed=12).requires_grad_()
    weights = _randn(b, seed=13).abs()
    loss, priorities = critic_loss(q, targets, weights)
    qs, ys, ws = q.tolist(), targets.tolist(), weights.tolist()
    expected = sum(sum(ws[j] * (qs[i][j] - ys[j]) ** 2 for j in range(b)) / b for i in range(k))
    assert float(loss.detach()) == pytest.approx(expected, abs=1e-12)
    for j in range(b):
        errors = [abs(qs[i][j] - ys[j]) for i in range(k)]
        assert float(priorities[j]) == pytest.approx(sum(errors) / k, abs=1e-12)
    assert not priorities.requires_grad
    loss.backward()
    assert q.grad is not None and targets.grad is None  # the targets are constants
    torch.testing.assert_close(q.grad, 2 * weights * (q.detach() - targets.detach()) / b)
    with pytest.raises(ValueError, match=r"targets must have shape \(12,\)"):
        critic_loss(q, targets[:, None], weights)


# --------------------------------------------------------------------------- the actors


def test_deterministic_actor_loss_is_minus_the_mean_q_and_ascends_it():
    q = _randn(7, seed=14).requires_grad_()
    loss = deterministic_actor_loss(q)
    assert float(loss.detach()) == pytest.approx(-sum(q.tolist()) / 7, abs=1e-12)
    loss.backward()
    assert q.grad is not None
    torch.testing.assert_close(q.grad, torch.full((7,), -1 / 7, dtype=F64))
    with pytest.raises(ValueError, match=r"q_first must be \[B\]"):
        deterministic_actor_loss(q.detach()[None])


def test_sac_actor_loss_matches_the_formula_and_pushes_up_the_lower_critic():
    k, b = 2, 9
    q = _randn(k, b, seed=15).requires_grad_()
    log_prob = _randn(b, seed=16).requires_grad_()
    alpha = torch.tensor(0.3, dtype=F64, requires_grad=True)
    loss = sac_actor_loss(q, log_prob, alpha)
    qs, log_probs = q.tolist(), log_prob.tolist()
    expected = sum(0.3 * log_probs[j] - min(qs[0][j], qs[1][j]) for j in range(b)) / b
    assert float(loss.detach()) == pytest.approx(expected, abs=1e-12)
    loss.backward()
    assert q.grad is not None and log_prob.grad is not None
    lower = q.detach() == q.detach().min(dim=0, keepdim=True).values
    torch.testing.assert_close(q.grad, torch.where(lower, -1 / b, 0.0).to(F64))
    torch.testing.assert_close(log_prob.grad, torch.full((b,), 0.3 / b, dtype=F64))
    assert alpha.grad is None  # the temperature is a constant to the actor


# --------------------------------------------------------------------------- the temperature


def test_temperature_gradient_is_minus_the_mean_of_log_prob_plus_target():
    log_prob = _randn(16, seed=17).requires_grad_()
    log_alpha = torch.tensor(0.4, dtype=F64, requires_grad=True)
    loss = temperature_loss(log_alpha, log_prob, target_entropy=-2.0)
    loss.backward()
    assert log_alpha.grad is not None and log_prob.grad is None  # log pi is a constant here
    expected = -(sum(log_prob.tolist()) / 16 - 2.0)
    assert float(log_alpha.grad) == pytest.approx(expected, abs=1e-12)
    assert float(loss.detach()) == pytest.approx(0.4 * expected, abs=1e-12)


@pytest.mark.parametrize("entropy_gap, rises", [(1.0, True), (-1.0, False)])
def test_a_temperature_step_raises_alpha_only_when_the_entropy_is_below_target(entropy_gap, rises):
    target = default_target_entropy(3)
    assert target == -3.0
    # entropy = -log_prob = target - entropy_gap: below the target when the gap is positive.
    log_prob = torch.full((8,), -(target - entropy_gap), dtype=F64)
    log_alpha = torch.tensor(0.0, dtype=F64, requires_grad=True)
    temperature_loss(log_alpha, log_prob, target).backward()
    assert log_alpha.grad is not None
    stepped = float(log_alpha.detach() - 0.1 * log_alpha.grad)  # one gradient-descent step
    assert (stepped > 0.0) == rises
    with pytest.raises(ValueError, match="action_dim must be >= 1, got 0"):
        default_target_entropy(0)


# --------------------------------------------------------------------------- the replay


def test_replay_n_step_targets_for_float_actions_match_a_direct_loop():
    """One stream with a truncation (step 3, then a reset step) and a termination (step 8):
    the returns and discounts the replay gives match a direct loop, and the float32 actions
    come back bit for bit."""
    n, gamma, steps = 3, 0.9, 15
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(steps, 1)).astype(np.float32)
    dones, valids = np.zeros((steps, 1), np.float32), np.ones((steps, 1), np.float32)
    rewards[4], dones[4], valids[4] = 0.0, 1.0, 0.0  # the reset step after step 3's truncation
    dones[8] = 1.0  # a termination
    actions = rng.uniform(-1, 1, size=(steps, 1, 2)).astype(np.float32)
    actions[0, 0] = [np.nextafter(np.float32(1), np.float32(0)), np.float32(1e-40)]
    obs = rng.normal(size=(steps + 1, 1, 3)).astype(np.float32)
    replay = ReplayBuffer(
        capacity=64,
        num_streams=1,
        obs_specs={"obs": TensorSpec(shape=(3,), dtype=torch.float32)},
        action_spec=TensorSpec(shape=(2,), dtype=torch.float32),
        n_step=n,
        gamma=gamma,
    )
    replay.add(np.array([0]), {"obs": obs}, actions, rewards, dones, valids)

    def direct(t: int) -> tuple[float, float] | None:
        """(R, d) of transition t, None where its window is not stored in full."""
        ret, discount = 0.0, 1.0
        for k in range(n):
            if t + k >= steps:
                return None
            if k > 0 and not valids[t + k, 0]:
                break  # a reset step: bootstrap from the truncated episode's final obs
            ret += discount * float(rewards[t + k, 0])
            discount *= gamma
            if dones[t + k, 0]:
                return ret, 0.0
        return ret, discount

    expected = {t: direct(t) for t in range(steps) if valids[t, 0] and direct(t) is not None}
    assert replay.num_sampleable == len(expected) == 12
    batch = replay.read(np.array(sorted(expected)))
    assert batch.actions.dtype == np.float32
    for b, t in enumerate(sorted(expected)):
        ret, discount = expected[t]
        assert float(batch.returns[b]) == pytest.approx(ret, abs=1e-5)
        assert float(batch.discounts[b]) == pytest.approx(discount, abs=1e-6)
        assert batch.actions[b].tobytes() == actions[t, 0].tobytes()
    discounts = dict(zip(sorted(expected), batch.discounts.tolist(), strict=True))
    assert discounts[2] == pytest.approx(gamma**2)  # truncated at 3: bootstraps after 2 steps
    assert discounts[6] == 0.0 and discounts[8] == 0.0  # terminated at 8: no bootstrap
    # The critic targets built from them bootstrap exactly where the episode did not end.
    y = critic_targets(
        torch.from_numpy(batch.returns),
        torch.from_numpy(batch.discounts),
        torch.full((len(expected),), 100.0),
    )
    torch.testing.assert_close(y, torch.from_numpy(batch.returns + 100.0 * batch.discounts))
