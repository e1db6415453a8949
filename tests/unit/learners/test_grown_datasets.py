"""On-policy learners on datasets grown by DatasetSizer (`max_batch_size`): the number of
minibatches stays `num_batches_per_epoch` and each grows, so one dataset is still
`num_epochs x num_batches_per_epoch` SGD steps (and the policy lag in SGD steps is unchanged)."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from sampleforge.config import make_config
from sampleforge.learners.actor_critic import ActorCriticLearner
from sampleforge.learners.pqn_learner import PQNLearner
from sampleforge.learners.probe_data import random_dataset
from sampleforge.models.factory import make_q_policy

OBS = gym.spaces.Box(-1, 1, (4,))
ACT = gym.spaces.Discrete(3)
T = 4
CPU = torch.device("cpu")
SETTINGS = dict(rollout=T, batch_size=2 * T, max_batch_size=8 * T, num_batches_per_epoch=2)


def _actor_critic(**overrides):
    cfg = make_config(**SETTINGS, **overrides)
    return cfg, ActorCriticLearner(cfg, OBS, ACT, CPU)


def _pqn():
    cfg = make_config(algorithm="pqn", **SETTINGS)
    return cfg, PQNLearner(cfg, make_q_policy(cfg, OBS, ACT), CPU)


LEARNERS = {
    "trajectory_minibatches": lambda: _actor_critic(shuffle_samples=False),
    "sample_minibatches": lambda: _actor_critic(shuffle_samples=True, with_vtrace=False),
    "pqn": _pqn,
}


@pytest.mark.parametrize("growth", [1, 4])
@pytest.mark.parametrize("kind", list(LEARNERS))
def test_a_grown_dataset_is_as_many_sgd_steps_of_larger_minibatches(kind, growth):
    cfg, learner = LEARNERS[kind]()
    grown = make_config(**{**SETTINGS, "batch_size": growth * cfg.batch_size})
    data = random_dataset(grown, OBS, ACT, rnn_state_size=0)
    assert data.num_trajectories == growth * cfg.dataset_size // T
    steps = []
    learner.train(data, lambda: steps.append(learner.policy_version))
    assert len(steps) == learner.sgd_steps_per_dataset == cfg.num_epochs * cfg.num_batches_per_epoch
    assert learner.env_steps == growth * cfg.dataset_size  # every sample was trained on
