"""Optimizer state from a checkpoint continues with this run's settings (learners/optimization.py:
`load_optimizer_state`)."""

from __future__ import annotations

import copy

import gymnasium as gym
import pytest
import torch

from sampleforge.config import make_config
from sampleforge.learners.actor_critic import ActorCriticLearner
from sampleforge.learners.optimization import load_optimizer_state


def _stepped_adam(**settings) -> tuple[torch.nn.Parameter, torch.optim.Adam]:
    weight = torch.nn.Parameter(torch.ones(3))
    adam = torch.optim.Adam([weight], **settings)
    for _ in range(2):
        adam.zero_grad()
        (weight**2).sum().backward()
        adam.step()
    return weight, adam


def test_the_moments_come_from_the_checkpoint_and_the_settings_stay_this_optimizers():
    _, saved = _stepped_adam(lr=1e-2, betas=(0.9, 0.999), eps=1e-8)
    state = copy.deepcopy(saved.state_dict())
    weight = torch.nn.Parameter(torch.ones(3))
    resumed = torch.optim.Adam([weight], lr=1e-3, betas=(0.5, 0.9), eps=1e-5)
    load_optimizer_state(resumed, state)
    (group,) = resumed.param_groups
    assert (group["lr"], group["betas"], group["eps"]) == (1e-3, (0.5, 0.9), 1e-5)
    moments = resumed.state[weight]
    assert float(moments["step"]) == 2.0
    assert torch.equal(moments["exp_avg"], saved.state_dict()["state"][0]["exp_avg"])


@pytest.mark.parametrize("settings", [{"adam_eps": 1e-3}, {"adam_beta2": 0.9}])
def test_a_resumed_actor_critic_learner_uses_the_adam_settings_of_its_config(settings):
    # Once a resume kept the checkpoint's eps and betas, whatever the new config said.
    obs, actions = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    first = ActorCriticLearner(make_config(), obs, actions, torch.device("cpu"))
    resumed = ActorCriticLearner(make_config(**settings), obs, actions, torch.device("cpu"))
    resumed.load_state_dict(copy.deepcopy(first.state_dict()))
    (group,) = resumed.optimizer.param_groups
    assert group["eps"] == resumed.cfg.adam_eps and group["betas"][1] == resumed.cfg.adam_beta2
