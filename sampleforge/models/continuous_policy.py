"""A continuous-control actor as a policy: how DDPG, TD3, SAC and CrossQ act.

Responsible for: ``ContinuousPolicy``, the ``Policy`` that inference, evaluation, ``enjoy``,
``export`` and the Python API act through for the continuous-control algorithms: the actor
(``continuous_actor.py``) over normalised vector observations, its actions rescaled from
[-1, 1] to the env's bounds, and exploration per env: uniformly random actions for the first
``random_action_steps`` env steps, then Gaussian noise on a deterministic actor or the squashed
Gaussian's own sample. Its weights include the observation statistics (saved with the model)
and the env steps the learner has trained on, by which inference ends the warm-up with no
channel but the published weights.

Must not: own the critics or target networks (the learner does), or compute losses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from sampleforge.algo.continuous_control import squashed_gaussian_sample
from sampleforge.models.continuous_actor import ContinuousActor, vector_observation
from sampleforge.models.normalizer import RunningMeanStd
from sampleforge.models.policy import ActOutput, ObsDict, Policy
from sampleforge.spaces import TensorSpec


@dataclass(frozen=True)
class ContinuousExploration:
    """How a continuous-control policy explores while it trains (``ContinuousSettings``)."""

    random_action_steps: int = 5_000
    noise_std: float = 0.1  # a deterministic actor's Gaussian noise, in half-ranges


def action_bounds(action_space: gym.Space) -> tuple[np.ndarray, np.ndarray]:
    """The flat [A] low and high of a bounded Box; ValueError (one line) otherwise."""
    if not isinstance(action_space, gym.spaces.Box):
        raise ValueError(
            f"continuous-control algorithms need Box actions; got {type(action_space).__name__}"
        )
    low = np.asarray(action_space.low, dtype=np.float64).reshape(-1)
    high = np.asarray(action_space.high, dtype=np.float64).reshape(-1)
    if not (np.isfinite(low).all() and np.isfinite(high).all() and (high > low).all()):
        raise ValueError(
            "continuous-control algorithms need finite action bounds (low < high): their "
            "actor's tanh spans them; wrap the env with gymnasium's RescaleAction"
        )
    return low, high


class ContinuousPolicy(Policy):
    """Acts with ``actor`` in the env's action bounds, exploring as ``exploration`` says."""

    trained_env_steps: Tensor
    action_center: Tensor
    action_half_range: Tensor

    def __init__(
        self,
        actor: ContinuousActor,
        obs_specs: Mapping[str, TensorSpec],
        action_space: gym.Space,
        exploration: ContinuousExploration,
        obs_normalizer: RunningMeanStd | None = None,
    ) -> None:
        super().__init__()
        low, high = action_bounds(action_space)
        self.actor = actor
        self.obs_specs = dict(sorted(obs_specs.items()))
        self.exploration = exploration
        self.obs_normalizer = obs_normalizer
        self.register_buffer("action_center", torch.tensor((high + low) / 2, dtype=torch.float32))
        self.register_buffer(
            "action_half_range", torch.tensor((high - low) / 2, dtype=torch.float32)
        )
        # Set by the learner before it publishes; inference ends the warm-up by it.
        self.register_buffer("trained_env_steps", torch.zeros((), dtype=torch.int64))

    @property
    def action_dim(self) -> int:
        return self.actor.action_dim

    def set_trained_env_steps(self, env_steps: int) -> None:
        self.trained_env_steps.fill_(int(env_steps))

    # --- observations and actions ---------------------------------------------------------------
    def observation_vector(self, obs: ObsDict) -> Tensor:
        """obs {key: [B, ...]} -> [B, F]: flattened, and normalised when configured."""
        x = vector_observation(obs)
        return x if self.obs_normalizer is None else self.obs_normalizer.normalize(x)

    @torch.no_grad()
    def update_normalizer(self, obs: ObsDict) -> None:
        """Merge observations into the statistics (the learner, on each batch it trains on)."""
        if self.obs_normalizer is not None:
            self.obs_normalizer.update(vector_observation(obs))

    def to_env_units(self, unit_actions: Tensor) -> Tensor:
        """[B, A] actions in [-1, 1] -> the env's bounds."""
        return self.action_center + self.action_half_range * unit_actions

    def to_unit(self, env_actions: Tensor) -> Tensor:
        """[B, A] actions in the env's bounds -> [-1, 1] (what the critics read)."""
        return ((env_actions - self.action_center) / self.action_half_range).clamp(-1.0, 1.0)

    # --- acting ---------------------------------------------------------------------------------
    def act(
        self,
        obs: ObsDict,
        rnn_states: Tensor,
        deterministic: bool = False,
        env_ids: Tensor | None = None,
    ) -> ActOutput:
        """``deterministic``: tanh of the actor's mean. Otherwise uniformly random actions
        during the warm-up, then the actor's mean with Gaussian noise (deterministic actor) or
        a sample of its squashed Gaussian. Log-probabilities and values are zeros (nothing
        reads them: the replay's targets need neither). No recurrent state."""
        out = self.actor(self.observation_vector(obs))
        batch = out.mean.shape[0]
        if deterministic:
            unit = torch.tanh(out.mean)
        elif int(self.trained_env_steps) < self.exploration.random_action_steps:
            unit = torch.rand_like(out.mean) * 2.0 - 1.0
        elif out.log_std is None:
            noise = torch.randn_like(out.mean) * self.exploration.noise_std
            unit = (torch.tanh(out.mean) + noise).clamp(-1.0, 1.0)
        else:
            unit, _ = squashed_gaussian_sample(out.mean, out.log_std)
        zeros = torch.zeros(batch, device=out.mean.device)
        return ActOutput(self.to_env_units(unit), zeros, zeros, rnn_states)

    def forward(self, obs: ObsDict) -> Tensor:
        """The deterministic actions [B, A] in the env's bounds (what ``export`` traces)."""
        return self.to_env_units(torch.tanh(self.actor(self.observation_vector(obs)).mean))
