"""The learner hands the config itself to the loss: `Config` inherits `ActorCriticSettings`, so
no copy of the settings can leave one out or go stale."""

import dataclasses

import gymnasium as gym
import torch

from sampleforge.algo.actor_critic_settings import ActorCriticSettings
from sampleforge.config import make_config
from sampleforge.learners.actor_critic import ActorCriticLearner


def test_every_loss_setting_is_read_from_the_config() -> None:
    # Values that differ from the settings' own defaults, so a setting not read shows.
    cfg = make_config(
        algorithm="impala",
        gamma=0.9,
        gae_lambda=0.8,
        with_vtrace=False,
        vtrace_rho_bar=2.0,
        vtrace_c_bar=0.5,
        ppo_clip_ratio=0.3,
        ppo_dual_clip=2.5,
        value_clip=0.4,
        value_loss_coeff=0.7,
        entropy_coeff=0.02,
        exploration_loss="symmetric_kl",
        normalize_advantages=False,
        advantage_scale="return_std",
        normalize_returns=True,
    )
    learner = ActorCriticLearner(
        cfg, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), torch.device("cpu")
    )
    defaults = ActorCriticSettings()
    for field in dataclasses.fields(ActorCriticSettings):
        assert getattr(learner.settings, field.name) == getattr(cfg, field.name), field.name
        assert getattr(learner.settings, field.name) != getattr(defaults, field.name), field.name

    # PBT changes the entropy coefficient the loss reads, and nothing else.
    learner.set_hyperparameters({"entropy_coeff": 0.05})
    for field in dataclasses.fields(ActorCriticSettings):
        expected = 0.05 if field.name == "entropy_coeff" else getattr(cfg, field.name)
        assert getattr(learner.settings, field.name) == expected, field.name
