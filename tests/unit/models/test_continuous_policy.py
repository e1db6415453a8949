"""The continuous-control policy (models/continuous_policy.py, built by models/factory.py):
uniformly random actions during the warm-up, then the actor's own exploration; actions always
inside the env's bounds; the deterministic action is what `forward` (export) gives; spaces the
family cannot act in are refused in one line."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from sampleforge.config import make_config
from sampleforge.models.continuous_policy import ContinuousPolicy
from sampleforge.models.factory import make_continuous_policy

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACTIONS = gym.spaces.Box(np.array([0.0, -3.0], np.float32), np.array([4.0, -1.0], np.float32))
N = 4_000


def policy(algorithm: str = "sac", **overrides: Any) -> ContinuousPolicy:
    torch.manual_seed(0)
    settings = dict(mlp_hidden_sizes=(16,), random_action_steps=1_000, **overrides)
    cfg = make_config(env="Pendulum-v1", algorithm=algorithm, **settings)
    return make_continuous_policy(cfg, OBS, ACTIONS).eval()


def act(model: ContinuousPolicy, deterministic: bool = False, same_obs: bool = True):
    obs = torch.zeros(N, 3) if same_obs else torch.rand(N, 3) * 2 - 1
    with torch.no_grad():
        out = model.act({"obs": obs}, torch.zeros(N, 0), deterministic=deterministic)
    return out.actions.numpy()


@pytest.mark.parametrize("algorithm", ["td3", "sac"])
def test_the_warm_up_acts_uniformly_over_the_bounds(algorithm):
    actions = act(policy(algorithm))
    assert (actions >= ACTIONS.low).all() and (actions <= ACTIONS.high).all()
    np.testing.assert_allclose(actions.mean(axis=0), (ACTIONS.low + ACTIONS.high) / 2, atol=0.1)
    # a uniform's std is range / sqrt(12)
    np.testing.assert_allclose(
        actions.std(axis=0), (ACTIONS.high - ACTIONS.low) / 12**0.5, rtol=0.05
    )


def test_after_the_warm_up_a_deterministic_actor_adds_gaussian_noise_to_its_action():
    model = policy("td3", exploration_noise=0.1)
    model.set_trained_env_steps(1_000)
    actions = act(model)
    mean_action = act(model, deterministic=True)[0]
    half_range = (ACTIONS.high - ACTIONS.low) / 2
    inside = np.abs(mean_action - (ACTIONS.low + ACTIONS.high) / 2) < 0.5 * half_range
    assert inside.all()  # far from the bounds: the noise is not clipped
    np.testing.assert_allclose(actions.mean(axis=0), mean_action, atol=0.02 * half_range.max())
    np.testing.assert_allclose(actions.std(axis=0), 0.1 * half_range, rtol=0.06)


def test_after_the_warm_up_sac_samples_its_squashed_gaussian_inside_the_bounds():
    model = policy("sac")
    model.set_trained_env_steps(1_000)
    actions = act(model)
    assert (actions >= ACTIONS.low).all() and (actions <= ACTIONS.high).all()
    warm_up = act(policy("sac"))
    assert (actions.std(axis=0) < warm_up.std(axis=0)).all()  # not the uniform any more
    assert (actions.std(axis=0) > 0).all()


@pytest.mark.parametrize("algorithm", ["ddpg", "sac"])
def test_the_deterministic_action_is_forward_s_and_ignores_the_warm_up(algorithm):
    model = policy(algorithm)
    obs = torch.rand(8, 3)
    with torch.no_grad():
        out = model.act({"obs": obs}, torch.zeros(8, 0), deterministic=True)
        torch.testing.assert_close(out.actions, model({"obs": obs}))
    assert (out.actions.numpy() >= ACTIONS.low).all()
    assert (out.actions.numpy() <= ACTIONS.high).all()


def test_unit_and_env_units_are_inverse():
    model = policy()
    unit = torch.rand(16, 2) * 2 - 1
    torch.testing.assert_close(model.to_unit(model.to_env_units(unit)), unit)
    torch.testing.assert_close(
        model.to_env_units(torch.tensor([[-1.0, -1.0], [1.0, 1.0]])),
        torch.from_numpy(np.stack([ACTIONS.low, ACTIONS.high])),
    )


def test_observation_statistics_are_part_of_the_weights():
    model = policy(normalize_obs=True)
    model.update_normalizer({"obs": torch.full((10, 3), 5.0)})
    assert "obs_normalizer.mean" in model.state_dict()
    torch.testing.assert_close(model.obs_normalizer.mean, torch.full((3,), 5.0))


@pytest.mark.parametrize(
    "action_space, message",
    [
        (gym.spaces.Discrete(3), "need Box actions; got Discrete"),
        (gym.spaces.Box(-np.inf, np.inf, (2,), np.float32), "need finite action bounds"),
    ],
)
def test_actions_the_family_cannot_take_are_refused_in_one_line(action_space, message):
    cfg = make_config(env="Pendulum-v1", algorithm="sac")
    with pytest.raises(ValueError, match=message) as caught:
        make_continuous_policy(cfg, OBS, action_space)
    assert "\n" not in str(caught.value)


def test_pixel_observations_are_refused_in_one_line():
    cfg = make_config(env="Pendulum-v1", algorithm="sac")
    pixels = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
    with pytest.raises(ValueError, match="float vector observations; key 'obs' holds pixels"):
        make_continuous_policy(cfg, pixels, ACTIONS)
