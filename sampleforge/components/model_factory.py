"""Builds a policy's network from the config and the env's spaces, the same way everywhere.

The learner, every inference worker and the Python API call this, so their models always have
identical parameter layouts (shared weights are copied as one flat vector).
"""

from __future__ import annotations

import gymnasium as gym

from sampleforge.config import Config, ConfigError
from sampleforge.models.actor_critic import ActorCritic

# Settings that change the network's parameter layout: a checkpoint is only valid for these.
MODEL_SETTINGS = ("encoder", "mlp_hidden_sizes", "activation", "rnn", "rnn_size",
                  "shared_weights", "normalize_obs", "normalize_returns",
                  "normalize_pixels")


def make_actor_critic(cfg: Config, observation_space: gym.Space,
                      action_space: gym.Space) -> ActorCritic:
    """The actor-critic network `cfg` describes, for these spaces."""
    return ActorCritic(observation_space, action_space, encoder=cfg.encoder,
                       mlp_hidden_sizes=tuple(cfg.mlp_hidden_sizes), activation=cfg.activation,
                       rnn_type=cfg.rnn, rnn_size=cfg.rnn_size,
                       shared_weights=cfg.shared_weights, normalize_obs=cfg.normalize_obs,
                       normalize_returns=cfg.normalize_returns,
                       normalize_pixels=cfg.normalize_pixels)


def check_model_fits_env(cfg: Config, env) -> None:
    """Build the model once before any process starts: a model setting that cannot work with
    the env's spaces (e.g. a conv encoder on vector observations) is a config error."""
    try:
        make_actor_critic(cfg, env.observation_space, env.action_space)
    except (ValueError, TypeError) as e:
        raise ConfigError([f"the model settings do not fit env {cfg.env!r} "
                           f"(observations {env.observation_space}): {e}"]) from None
