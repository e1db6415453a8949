"""check_model_fits_env: model settings that cannot work with an env's spaces are config errors."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from sampleforge.config import ConfigError, make_config
from sampleforge.models.factory import check_model_fits_env

VECTOR_OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def _env(action_space: gym.Space) -> SimpleNamespace:
    return SimpleNamespace(observation_space=VECTOR_OBS, action_space=action_space)


def test_symmetric_kl_exploration_needs_discrete_actions() -> None:
    cfg = make_config(env="Pendulum-v1", exploration_loss="symmetric_kl", serial_mode=True)
    with pytest.raises(ConfigError, match="symmetric_kl.*Box actions.*'Pendulum-v1'"):
        check_model_fits_env(cfg, _env(gym.spaces.Box(-2.0, 2.0, (1,), np.float32)))
    check_model_fits_env(cfg, _env(gym.spaces.Discrete(3)))
    entropy = make_config(env="Pendulum-v1", serial_mode=True)
    check_model_fits_env(entropy, _env(gym.spaces.Box(-2.0, 2.0, (1,), np.float32)))


def test_a_conv_encoder_on_vector_observations_is_a_config_error() -> None:
    cfg = make_config(env="CartPole-v1", encoder="conv_simple", serial_mode=True)
    with pytest.raises(ConfigError, match="the model settings do not fit env 'CartPole-v1'"):
        check_model_fits_env(cfg, _env(gym.spaces.Discrete(2)))


def test_a_model_too_large_to_allocate_is_a_config_error_naming_its_sizes() -> None:
    """It once came out as torch's allocation traceback."""
    cfg = make_config(env="CartPole-v1", rnn="gru", rnn_size=1_000_000, serial_mode=True)
    with pytest.raises(ConfigError, match="does not fit in memory.*rnn_size 1000000"):
        check_model_fits_env(cfg, _env(gym.spaces.Discrete(2)))
