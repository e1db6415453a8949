"""Probe environments: tiny tasks that each test one ability of the learning code, in seconds.

| probe | what it checks |
| --- | --- |
| `ConstantRewardProbe(ending="time_limit")` | time-limit truncation is bootstrapped: the observation never changes and every step pays `reward`, so the only consistent value is reward / (1 - gamma) at every step |
| `ConstantRewardProbe(ending="terminal")` | a true termination is never bootstrapped: the value falls towards the end, and its average over the episode's steps is known in closed form (`constant_reward_values`) |
| `register_scaled_cartpole(name, scale)` | learning does not depend on the reward's scale: CartPole-v1 paying `scale` per step (return normalisation) |

The observation does not tell the time, so an agent that treats the time limit as a termination
can only learn an average of the discounted sums left over the episode's steps.

Worker processes receive the resolved `EnvSpec` pickled, so the factory is a `functools.partial`
of a top-level function; `register_probe_env` does that.

Must not: import the runner or any component; depend on anything but numpy and gymnasium.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from sampleforge.envs.registry import EnvContext, register_env

Ending = Literal["time_limit", "terminal"]

__all__ = ["ConstantRewardProbe", "constant_reward_values", "register_probe_env",
           "register_scaled_cartpole"]


class ConstantRewardProbe(gym.Env):
    """Reward `reward` at every step, a constant observation, `episode_length` steps per episode,
    ended by a time limit (`truncated`) or a termination (`terminated`)."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, episode_length: int = 20, ending: Ending = "time_limit",
                 reward: float = 1.0):
        if ending not in ("time_limit", "terminal"):
            raise ValueError(f"ending {ending!r} is not one of time_limit, terminal")
        self.episode_length = episode_length
        self.ending = ending
        self.reward = float(reward)
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        return np.ones(1, np.float32), {}

    def step(self, action: Any):
        self._t += 1
        end = self._t >= self.episode_length
        terminated = end and self.ending == "terminal"
        truncated = end and self.ending == "time_limit"
        return np.ones(1, np.float32), self.reward, terminated, truncated, {}


def constant_reward_values(episode_length: int, gamma: float, reward: float = 1.0,
                           ending: Ending = "time_limit") -> np.ndarray:
    """The true value of each step t = 0 .. episode_length - 1 of `ConstantRewardProbe`.

    With a time limit the task goes on forever as far as the agent can know:
    V = reward / (1 - gamma). With termination, V(t) = reward (1 - gamma^(L - t)) / (1 - gamma).
    """
    steps_left = episode_length - np.arange(episode_length)
    if ending == "time_limit":
        return np.full(episode_length, reward / (1.0 - gamma))
    return reward * (1.0 - gamma ** steps_left) / (1.0 - gamma)


def make_constant_reward_probe(context: EnvContext, **kwargs: Any) -> ConstantRewardProbe:
    return ConstantRewardProbe(**kwargs)


def register_probe_env(name: str, **kwargs: Any) -> str:
    """Register `ConstantRewardProbe(**kwargs)` under `name`; returns the name."""
    register_env(name, functools.partial(make_constant_reward_probe, **kwargs),
                 description=f"ConstantRewardProbe({kwargs})", overwrite=True)
    return name


def make_scaled_cartpole(context: EnvContext, scale: float) -> gym.Env:
    """CartPole-v1 whose every reward is multiplied by `scale` (solved at 475 x scale)."""
    return gym.wrappers.TransformReward(gym.make("CartPole-v1"), lambda r: r * scale)


def register_scaled_cartpole(name: str, scale: float) -> str:
    """Register CartPole-v1 with rewards multiplied by `scale` under `name`; returns the name."""
    register_env(name, functools.partial(make_scaled_cartpole, scale=scale),
                 description=f"CartPole-v1, rewards x {scale}", overwrite=True)
    return name
