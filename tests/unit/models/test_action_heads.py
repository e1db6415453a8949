"""Unit tests for the action heads and their distributions."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal, kl_divergence

from sampleforge.models.action_heads import (
    CategoricalActionHead,
    GaussianActionHead,
    make_action_head,
)
from sampleforge.spaces import UnsupportedSpaceError, action_spec, actions_to_env

SPACES = {
    "discrete": gym.spaces.Discrete(4),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 3, 2]),
    "tuple": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Discrete(21))),
    "box": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
}
N, H = 16, 8


@pytest.mark.parametrize("name", list(SPACES))
def test_sample_mode_log_prob_entropy_shapes(name: str) -> None:
    space = SPACES[name]
    spec = action_spec(space)
    head = make_action_head(space, H)
    dist = head(torch.randn(N, H))
    for actions in (dist.sample(), dist.mode()):
        assert actions.shape == (N, *spec.shape) and actions.dtype == spec.dtype
        log_prob = dist.log_prob(actions)
        assert log_prob.shape == (N,) and torch.isfinite(log_prob).all()
        for env_action in actions_to_env(actions.numpy(), space):
            assert space.contains(env_action)
    entropy = dist.entropy()
    assert entropy.shape == (N,) and torch.isfinite(entropy).all()


@pytest.mark.parametrize("name", ["discrete", "multidiscrete", "tuple"])
def test_categorical_matches_independent_torch_categoricals(name: str) -> None:
    head = make_action_head(SPACES[name], H)
    assert isinstance(head, CategoricalActionHead)
    features = torch.randn(N, H)
    dist = head(features)
    actions = dist.sample()
    logits = head.linear(features).split(head.sizes, dim=-1)
    refs = [Categorical(logits=chunk) for chunk in logits]
    expected_lp = sum(ref.log_prob(actions[:, k]) for k, ref in enumerate(refs))
    expected_ent = sum(ref.entropy() for ref in refs)
    torch.testing.assert_close(dist.log_prob(actions), expected_lp)
    torch.testing.assert_close(dist.entropy(), expected_ent)
    expected_mode = torch.stack([chunk.argmax(-1) for chunk in logits], dim=-1)
    assert torch.equal(dist.mode(), expected_mode)


@pytest.mark.parametrize("name", ["discrete", "multidiscrete", "tuple"])
def test_symmetric_kl_to_uniform_matches_torch_kl_per_head(name: str) -> None:
    head = make_action_head(SPACES[name], H)
    features = torch.randn(N, H) * 3.0
    dist = head(features)
    logits = head.linear(features).split(head.sizes, dim=-1)
    expected = torch.zeros(N)
    for chunk in logits:
        pi = Categorical(logits=chunk)
        uniform = Categorical(logits=torch.zeros_like(chunk))
        expected += 0.5 * (kl_divergence(pi, uniform) + kl_divergence(uniform, pi))
    torch.testing.assert_close(dist.symmetric_kl_to_uniform(), expected)


def test_symmetric_kl_keeps_pulling_where_the_entropy_stops() -> None:
    """On a policy close to deterministic, the entropy's gradient on the neglected logits
    nearly vanishes; the KL to uniform still pulls them up by about (1/n) / 2 each."""
    head = CategoricalActionHead(1, [4])
    with torch.no_grad():
        head.linear.weight.zero_()
        head.linear.bias.copy_(torch.tensor([12.0, 0.0, 0.0, 0.0]))
    dist = head(torch.zeros(1, 1))
    (entropy_grad,) = torch.autograd.grad(-dist.entropy().sum(), head.linear.bias)
    dist = head(torch.zeros(1, 1))
    (kl_grad,) = torch.autograd.grad(dist.symmetric_kl_to_uniform().sum(), head.linear.bias)
    assert entropy_grad[1:].abs().max() < 1e-3
    torch.testing.assert_close(kl_grad[1:], torch.full((3,), -0.125), atol=1e-3, rtol=0)
    with torch.no_grad():
        assert float(head(torch.zeros(1, 1)).symmetric_kl_to_uniform()) > 1.0
        head.linear.bias.zero_()
        assert float(head(torch.zeros(1, 1)).symmetric_kl_to_uniform()) == pytest.approx(0.0)


def test_categorical_samples_follow_the_logits() -> None:
    head = CategoricalActionHead(1, [3])
    with torch.no_grad():
        head.linear.weight.zero_()
        head.linear.bias.copy_(torch.tensor([0.0, 10.0, -10.0]))
    actions = head(torch.zeros(2000, 1)).sample()
    assert (actions == 1).float().mean() > 0.99


def test_gaussian_head_log_std_and_reference_density() -> None:
    head = make_action_head(SPACES["box"], H)
    assert isinstance(head, GaussianActionHead)
    assert isinstance(head.log_std, torch.nn.Parameter)
    assert torch.equal(head.log_std.detach(), torch.zeros(2))
    with torch.no_grad():
        head.log_std.copy_(torch.tensor([-0.5, 0.3]))
    features = torch.randn(N, H)
    dist = head(features)
    ref = Normal(head.mean(features), head.log_std.exp())
    actions = dist.sample()
    torch.testing.assert_close(dist.log_prob(actions), ref.log_prob(actions).sum(-1))
    torch.testing.assert_close(dist.entropy(), ref.entropy().sum(-1))
    torch.testing.assert_close(dist.mode(), ref.mean)


def test_gaussian_log_std_receives_gradient() -> None:
    head = GaussianActionHead(H, 2)
    dist = head(torch.randn(N, H))
    (dist.log_prob(torch.randn(N, 2)).mean() + dist.entropy().mean()).backward()
    assert head.log_std.grad is not None and head.log_std.grad.abs().sum() > 0


def test_unsupported_action_space() -> None:
    with pytest.raises(UnsupportedSpaceError):
        make_action_head(gym.spaces.MultiBinary(3), H)
