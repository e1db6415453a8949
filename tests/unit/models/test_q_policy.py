"""How the value-based policies act (models/q_policy.py, models/exploration.py): the Ape-X
epsilon ladder and the linear schedule against their formulas, epsilon-greedy draws and their
behaviour log-probabilities, greedy evaluation with the noise-free network, noisy acting that
redraws noise with epsilon 0, and the shapes of what `act` returns."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from sampleforge.models.exploration import epsilon_greedy, ladder_epsilons, linear_epsilon
from sampleforge.models.q_network import make_q_network
from sampleforge.models.q_policy import Exploration, QPolicy

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACTIONS = gym.spaces.Discrete(3)
B = 64


def policy(exploration: Exploration | None = None, head: str = "scalar", noisy: bool = False):
    torch.manual_seed(0)
    network = make_q_network(
        OBS, ACTIONS, head=head, noisy=noisy, mlp_hidden_sizes=(16,), num_quantiles=8
    )
    return QPolicy(network, exploration or Exploration())


def observations(batch: int = B, seed: int = 1) -> dict[str, torch.Tensor]:
    return {"obs": torch.randn(batch, 4, generator=torch.Generator().manual_seed(seed))}


# --- exploration.py ----------------------------------------------------------------------------
def test_ladder_epsilons_follow_the_ape_x_formula():
    n, base, alpha = 8, 0.4, 7.0
    eps = ladder_epsilons(torch.arange(n), n, base, alpha)
    want = [base ** (1 + alpha * i / (n - 1)) for i in range(n)]
    torch.testing.assert_close(eps, torch.tensor(want), rtol=1e-6, atol=0.0)
    assert eps[0] == pytest.approx(base) and eps[-1] == pytest.approx(base**8)
    # Env ids of the sampler past N wrap around; a single env gets the base epsilon.
    torch.testing.assert_close(ladder_epsilons(torch.arange(n, 2 * n), n, base, alpha), eps)
    torch.testing.assert_close(
        ladder_epsilons(torch.zeros(3, dtype=torch.long), 1, 0.3, 7.0), torch.full((3,), 0.3)
    )


def test_linear_epsilon_endpoints_and_midpoint():
    assert linear_epsilon(0, 1.0, 0.05, 1000) == 1.0
    assert linear_epsilon(500, 1.0, 0.05, 1000) == pytest.approx(0.525)
    assert linear_epsilon(1000, 1.0, 0.05, 1000) == pytest.approx(0.05)
    assert linear_epsilon(10**6, 1.0, 0.05, 1000) == pytest.approx(0.05)
    assert linear_epsilon(-5, 1.0, 0.05, 1000) == 1.0


def test_epsilon_zero_is_greedy_with_probability_one():
    torch.manual_seed(0)
    q = torch.randn(B, 5)
    actions, log_probs = epsilon_greedy(q, torch.zeros(B))
    assert actions.dtype == torch.int64 and actions.shape == (B,)
    torch.testing.assert_close(actions, q.argmax(dim=1))
    torch.testing.assert_close(log_probs, torch.zeros(B))


def test_epsilon_one_is_uniform():
    torch.manual_seed(0)
    n, num_actions = 20_000, 4
    q = torch.zeros(n, num_actions)
    q[:, 2] = 1.0  # a clear greedy action that exploration must not favour
    actions, log_probs = epsilon_greedy(q, torch.ones(n))
    counts = torch.bincount(actions, minlength=num_actions).float()
    sigma = math.sqrt(n * 0.25 * 0.75)
    assert torch.all((counts - n / 4).abs() < 5 * sigma), counts
    torch.testing.assert_close(log_probs, torch.full((n,), math.log(0.25)))


def test_epsilon_greedy_log_probs_are_the_behaviour_policys():
    torch.manual_seed(1)
    n, num_actions = 20_000, 4
    q = torch.randn(n, num_actions)
    eps = torch.where(torch.arange(n) % 2 == 0, 0.3, 0.8)
    actions, log_probs = epsilon_greedy(q, eps)
    greedy = actions == q.argmax(dim=1)
    want = torch.where(greedy, torch.log(1 - eps + eps / num_actions), torch.log(eps / num_actions))
    torch.testing.assert_close(log_probs, want)
    for e in (0.3, 0.8):
        rows = eps == e
        p_greedy = 1 - e + e / num_actions
        frequency = greedy[rows].float().mean().item()
        assert frequency == pytest.approx(p_greedy, abs=5 * math.sqrt(p_greedy / rows.sum()))


# --- q_policy.py -------------------------------------------------------------------------------
@pytest.mark.parametrize("head", ["scalar", "categorical", "implicit_quantile"])
def test_deterministic_acting_is_greedy_and_repeatable(head):
    model = policy(Exploration(epsilon_start=1.0, epsilon_end=1.0), head=head)
    obs = observations()
    out = model.act(obs, torch.zeros(B, 0), deterministic=True)
    model.network.eval()
    with torch.no_grad():
        q = model.network.q_values(obs)
    model.network.train()
    assert out.actions.shape == (B, 1) and out.actions.dtype == torch.int64
    torch.testing.assert_close(out.actions[:, 0], q.argmax(dim=1))  # epsilon 1 ignored
    torch.testing.assert_close(out.values, q.max(dim=1).values)
    torch.testing.assert_close(out.log_probs, torch.zeros(B))
    again = model.act(obs, torch.zeros(B, 0), deterministic=True)
    torch.testing.assert_close(again.values, out.values)
    assert model.network.training  # the network's mode is left as it was


def test_deterministic_noisy_acting_uses_the_noise_free_network():
    model = policy(Exploration(kind="noisy"), noisy=True)
    obs = observations()
    model.network.reset_noise()
    noisy_q = model.network.q_values(obs)  # training mode: with noise
    model.network.eval()
    mean_q = model.network.q_values(obs)
    model.network.train()
    assert not torch.allclose(noisy_q, mean_q)
    for _ in range(2):
        out = model.act(obs, torch.zeros(B, 0), deterministic=True)
        torch.testing.assert_close(out.values, mean_q.max(dim=1).values)
        torch.testing.assert_close(out.actions[:, 0], mean_q.argmax(dim=1))
        model.network.reset_noise()


def test_noisy_acting_draws_fresh_noise_and_no_epsilon():
    model = policy(Exploration(kind="noisy", epsilon_start=1.0, epsilon_end=1.0), noisy=True)
    obs = observations()
    torch.manual_seed(3)
    first = model.act(obs, torch.zeros(B, 0))
    second = model.act(obs, torch.zeros(B, 0))
    assert not torch.equal(first.values, second.values)  # noise redrawn on each call
    torch.testing.assert_close(model.epsilons(B, None, torch.device("cpu")), torch.zeros(B))
    torch.testing.assert_close(first.log_probs, torch.zeros(B))  # greedy in the noisy net
    assert model.network.training


def test_acting_epsilon_follows_the_trained_env_steps_and_the_ladder():
    linear = policy(Exploration(epsilon_start=1.0, epsilon_end=0.1, anneal_env_steps=1000))
    cpu = torch.device("cpu")
    torch.testing.assert_close(linear.epsilons(4, None, cpu), torch.ones(4))
    linear.set_trained_env_steps(500)
    torch.testing.assert_close(linear.epsilons(4, None, cpu), torch.full((4,), 0.55))
    assert int(linear.state_dict()["trained_env_steps"]) == 500  # published with the weights

    ladder = policy(Exploration(kind="ladder", ladder_base=0.4, ladder_alpha=7.0, num_envs=8))
    ids = torch.tensor([7, 0, 3])
    torch.testing.assert_close(ladder.epsilons(3, ids, cpu), ladder_epsilons(ids, 8, 0.4, 7.0))
    # Inference computes env indices only for a policy that asks for them.
    assert ladder.explores_per_env and not linear.explores_per_env


def test_act_output_shapes_and_values_are_max_q():
    model = policy(Exploration(epsilon_start=0.5, epsilon_end=0.5))
    obs = observations(batch=7)
    rnn = torch.zeros(7, 0)
    out = model.act(obs, rnn)
    assert out.actions.shape == (7, 1) and out.actions.dtype == torch.int64
    assert out.log_probs.shape == (7,) and out.values.shape == (7,)
    assert out.new_rnn_states is rnn
    with torch.no_grad():
        q = model.network.q_values(obs)
    torch.testing.assert_close(out.values, q.max(dim=1).values)
    assert set(out.actions[:, 0].tolist()) <= {0, 1, 2}
