"""A stand-in for a third-party package that registers a Gymnasium env when it is imported.

Importing this module registers ``ThirdPartyProbe-v0`` with Gymnasium, the way packages such as
``minigrid`` or ``ale_py`` register theirs. Nothing in sampleforge imports it, so it exercises
Gymnasium's ``module:EnvId`` syntax end to end:

    sampleforge train --env sampleforge.testing.third_party_env:ThirdPartyProbe-v0

``ProbeEnv`` is tiny and pure numpy: the observation is a random vector, and the reward is 1 when
the action is the sign of its first entry (0 for negative, 1 otherwise); episodes last
``EPISODE_STEPS`` steps (Gymnasium's ``TimeLimit`` truncates them).

Must not: import anything from sampleforge (a real third-party package would not).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "ThirdPartyProbe-v0"
EPISODE_STEPS = 16
REWARD_THRESHOLD = 15.0


class ProbeEnv(gym.Env):
    """Guess the sign of the first observation entry; one point per right guess."""

    metadata = {"render_modes": []}
    observation_space = gym.spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        self._obs = np.zeros(4, dtype=np.float32)

    def _next_obs(self) -> np.ndarray:
        self._obs = self.np_random.uniform(-1.0, 1.0, size=4).astype(np.float32)
        return self._obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return self._next_obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward = float(int(action) == int(self._obs[0] >= 0.0))
        return self._next_obs(), reward, False, False, {}


gym.register(
    id=ENV_ID,
    entry_point=f"{__name__}:ProbeEnv",
    max_episode_steps=EPISODE_STEPS,
    reward_threshold=REWARD_THRESHOLD,
)
