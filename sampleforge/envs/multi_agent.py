"""The multi-agent environment interface: several agents acting at once in one env instance.

A `MultiAgentEnv` has a fixed number of agent seats (`num_agents`), all with the same
observation and action space (the spaces of one agent). Every call speaks in lists or arrays
indexed by seat:

    observations, infos = env.reset(seed=None)
    observations, rewards, terminated, truncated, infos = env.step(actions)

- `observations`: a list of `num_agents` observations, each in `observation_space`.
- `rewards`: float array `[num_agents]`; `terminated`, `truncated`: bool arrays `[num_agents]`.
- `infos`: a list of `num_agents` dicts. On the step where an agent finishes, its info may hold
  `"win"` (1.0 win, 0.5 draw, 0.0 loss), which self-play statistics and PBT's win-rate objective
  read.

Agents may finish at different times. Once an agent is done, the env keeps returning a
placeholder observation for its seat (any value in the space), reward 0 and done flags set, and
ignores its actions; the runtime marks those steps invalid so they are never trained on. The
episode ends when every agent is done; the runtime then calls `reset` (never the env itself).

An env factory registered with `register_env(..., multi_agent=True)` returns a `MultiAgentEnv`
instead of a `gymnasium.Env`. PettingZoo parallel envs are adapted to this interface by
`sampleforge.envs.pettingzoo_env`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import gymnasium as gym
import numpy as np

MultiAgentStep = tuple[list[Any], np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]


class MultiAgentEnv(ABC):
    """Several agents in one env; see the module docstring for the contract."""

    num_agents: int
    observation_space: gym.Space  # of one agent
    action_space: gym.Space  # of one agent
    # Named reward-shaping coefficients PBT may mutate, with their defaults; empty if none.
    # Each seat has its own values, because each seat may be played by a different policy.
    reward_shaping_defaults: dict[str, float] = {}

    @abstractmethod
    def reset(self, seed: int | None = None) -> tuple[list[Any], list[dict[str, Any]]]:
        """Start a new episode for every agent."""

    @abstractmethod
    def step(self, actions: list[Any]) -> MultiAgentStep:
        """Apply one action per seat (ignored for seats that are done)."""

    def reward_shaping(self, agent: int) -> dict[str, float]:
        """The reward-shaping coefficients seat `agent` is rewarded with now."""
        overrides = getattr(self, "_shaping_overrides", {}).get(agent, {})
        return {**self.reward_shaping_defaults, **overrides}

    def set_reward_shaping(self, agent: int, coefficients: dict[str, float]) -> None:
        """Reward seat `agent` with these coefficients from now on (PBT mutates them)."""
        unknown = set(coefficients) - set(self.reward_shaping_defaults)
        if unknown:
            raise KeyError(
                f"unknown reward-shaping coefficients {sorted(unknown)}; "
                f"this env has {sorted(self.reward_shaping_defaults)}"
            )
        if not hasattr(self, "_shaping_overrides"):
            self._shaping_overrides: dict[int, dict[str, float]] = {}
        self._shaping_overrides[agent] = dict(coefficients)

    def close(self) -> None:  # noqa: B027 - optional: most envs hold nothing to release
        """Release the env's resources."""
