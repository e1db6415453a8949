"""GAE and n-step returns checked against plain Python loops over the definitions."""

from __future__ import annotations

import math

import pytest
import torch

from sampleforge.algo.gae import gae_advantages, n_step_returns


def make_rollout(seed: int, T: int = 8, B: int = 3) -> dict:
    g = torch.Generator().manual_seed(seed)
    dones = (torch.rand(T, B, generator=g, dtype=torch.float64) < 0.25).double()
    dones[3, 1] = 1.0  # an episode end strictly inside the rollout
    return {
        "rewards": torch.randn(T, B, generator=g, dtype=torch.float64),
        "values": torch.randn(T, B, generator=g, dtype=torch.float64),
        "bootstrap_value": torch.randn(B, generator=g, dtype=torch.float64),
        "dones": dones,
    }


def reference_gae(rewards, values, bootstrap_value, dones, gamma, lambda_):
    """A_t = sum_{l=0}^{T-1-t} (prod_{k=t}^{t+l-1} gamma_k lambda) delta_{t+l} as a double loop."""
    T, B = rewards.shape
    V = values.tolist() + [bootstrap_value.tolist()]
    r, d = rewards.tolist(), dones.tolist()
    advantages = [[0.0] * B for _ in range(T)]
    for b in range(B):
        for t in range(T):
            total, weight = 0.0, 1.0
            for k in range(t, T):
                discount_k = gamma * (1.0 - d[k][b])
                delta_k = r[k][b] + discount_k * V[k + 1][b] - V[k][b]
                total += weight * delta_k
                weight *= discount_k * lambda_
            advantages[t][b] = total
    return torch.tensor(advantages, dtype=torch.float64)


def reference_n_step(rewards, bootstrap_value, dones, gamma):
    """G_t = sum_{k>=t} (prod_{i=t}^{k-1} gamma_i) r_k + (prod_{i=t}^{T-1} gamma_i) V(x_T)."""
    T, B = rewards.shape
    r, d = rewards.tolist(), dones.tolist()
    returns = [[0.0] * B for _ in range(T)]
    for b in range(B):
        for t in range(T):
            total, weight = 0.0, 1.0
            for k in range(t, T):
                total += weight * r[k][b]
                weight *= gamma * (1.0 - d[k][b])
            returns[t][b] = total + weight * bootstrap_value[b].item()
    return torch.tensor(returns, dtype=torch.float64)


@pytest.mark.parametrize("lambda_", [0.0, 0.5, 0.95, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_double_loop(seed: int, lambda_: float) -> None:
    rollout = make_rollout(seed)
    advantages, returns = gae_advantages(**rollout, gamma=0.9, lambda_=lambda_)
    torch.testing.assert_close(advantages, reference_gae(**rollout, gamma=0.9, lambda_=lambda_))
    torch.testing.assert_close(returns, advantages + rollout["values"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lambda_one_is_n_step_return_minus_values(seed: int) -> None:
    rollout = make_rollout(seed)
    advantages, returns = gae_advantages(**rollout, gamma=0.97, lambda_=1.0)
    n_step = n_step_returns(
        rewards=rollout["rewards"],
        bootstrap_value=rollout["bootstrap_value"],
        dones=rollout["dones"],
        gamma=0.97,
    )
    torch.testing.assert_close(advantages, n_step - rollout["values"])
    torch.testing.assert_close(returns, n_step)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lambda_zero_is_one_step_td_error(seed: int) -> None:
    rollout = make_rollout(seed)
    gamma = 0.97
    advantages, _ = gae_advantages(**rollout, gamma=gamma, lambda_=0.0)
    next_values = torch.cat([rollout["values"][1:], rollout["bootstrap_value"][None]])
    td_errors = (
        rollout["rewards"] + gamma * (1 - rollout["dones"]) * next_values - rollout["values"]
    )
    torch.testing.assert_close(advantages, td_errors)


@pytest.mark.parametrize("seed", [0, 1])
def test_n_step_returns_match_definition(seed: int) -> None:
    rollout = make_rollout(seed)
    del rollout["values"]
    torch.testing.assert_close(
        n_step_returns(**rollout, gamma=0.9), reference_n_step(**rollout, gamma=0.9)
    )


def test_n_step_hand_computed() -> None:
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    dones = torch.tensor([[0.0], [1.0], [0.0]])
    bootstrap = torch.tensor([10.0])
    returns = n_step_returns(rewards=rewards, bootstrap_value=bootstrap, dones=dones, gamma=0.5)
    # G_2 = 3 + 0.5 * 10 = 8; G_1 = 2 (episode ends); G_0 = 1 + 0.5 * 2 = 2
    torch.testing.assert_close(returns, torch.tensor([[2.0], [2.0], [8.0]]))


def test_masked_steps_get_zero_advantage_and_cut_the_trace() -> None:
    rollout = make_rollout(4)
    valids = torch.ones_like(rollout["rewards"])
    valids[5, 0] = 0.0
    advantages, returns = gae_advantages(**rollout, gamma=0.9, lambda_=0.9, valids=valids)
    assert advantages[5, 0] == 0.0
    torch.testing.assert_close(returns[5, 0], rollout["values"][5, 0])

    wild = dict(rollout, rewards=rollout["rewards"].clone(), dones=rollout["dones"].clone())
    wild["rewards"][5, 0] = math.inf
    wild["dones"][5, 0] = 1e6
    wild_advantages, _ = gae_advantages(**wild, gamma=0.9, lambda_=0.9, valids=valids)
    torch.testing.assert_close(wild_advantages, advantages)

    # the valid step before the masked one only bootstraps from V(x_5)
    truncated = {k: v[:5] if v.dim() == 2 else v for k, v in rollout.items()}
    truncated["bootstrap_value"] = rollout["values"][5]
    expected, _ = gae_advantages(**truncated, gamma=0.9, lambda_=0.9)
    torch.testing.assert_close(advantages[:5, 0], expected[:, 0])


def test_no_grad_and_shapes() -> None:
    rollout = {k: v.float().requires_grad_(k != "dones") for k, v in make_rollout(0).items()}
    advantages, returns = gae_advantages(**rollout, gamma=0.99, lambda_=0.95)
    assert not advantages.requires_grad and not returns.requires_grad
    assert advantages.shape == returns.shape == rollout["values"].shape
    assert advantages.dtype == torch.float32

    with pytest.raises(ValueError, match="rewards"):
        gae_advantages(**dict(rollout, rewards=rollout["rewards"][:-1]), gamma=0.9, lambda_=0.9)
    with pytest.raises(ValueError):
        n_step_returns(
            rewards=rollout["rewards"],
            bootstrap_value=rollout["values"],
            dones=rollout["dones"],
            gamma=0.9,
        )


def test_bool_dones_accepted() -> None:
    rollout = make_rollout(2)
    as_bool = dict(rollout, dones=rollout["dones"].bool())
    torch.testing.assert_close(
        gae_advantages(**as_bool, gamma=0.9, lambda_=0.8)[0],
        gae_advantages(**rollout, gamma=0.9, lambda_=0.8)[0],
    )
