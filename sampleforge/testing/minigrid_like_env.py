"""A stand-in for a MiniGrid-like third-party gridworld, registered with Gymnasium on import.

Its observation is MiniGrid's: a Dict of a small ``image`` (a 7x7x3 uint8 grid of object codes,
too small for the conv encoders), a ``Discrete(4)`` ``direction`` and a ``Text`` ``mission``. It
checks that such an env trains from the command line with only ``--drop_obs_keys mission``:

    sampleforge train --env sampleforge.testing.minigrid_like_env:MiniGridLike-v0 \\
        --drop_obs_keys mission

The task needs the direction: at every step the agent is shown a random direction and is paid 1
for the action of the same number (0-3), 0 otherwise. The image shows the agent at a random cell
but never which way it faces (as MiniGrid's egocentric view does not), and the mission never
changes, so a policy that ignores or mis-encodes ``direction`` earns 1/4 per step on average;
one that reads it earns 1. Episodes last ``EPISODE_STEPS`` steps (Gymnasium's ``TimeLimit``
truncates them).

Must not: import anything from sampleforge (a real third-party package would not).
"""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "MiniGridLike-v0"
EPISODE_STEPS = 8
# 5 of 8 right: a policy blind to the direction earns 2 per episode on average, and its mean
# over 100 episodes (sd 0.12) never comes near 5.
REWARD_THRESHOLD = 5.0
GRID = 7
MISSION = "face the way you are told"
AGENT_CODE = 10  # MiniGrid's object code of the agent


class MiniGridLikeEnv(gym.Env):
    """Pick the action that matches the observed direction; one point per right pick."""

    metadata = {"render_modes": []}
    observation_space = gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (GRID, GRID, 3), np.uint8),
            "direction": gym.spaces.Discrete(4),
            "mission": gym.spaces.Text(64, charset=string.ascii_lowercase + " "),
        }
    )
    action_space = gym.spaces.Discrete(4)

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        self._direction = 0

    def _observation(self) -> dict[str, Any]:
        self._direction = int(self.np_random.integers(4))
        image = np.zeros((GRID, GRID, 3), np.uint8)
        row, col = self.np_random.integers(GRID, size=2)
        image[row, col, 0] = AGENT_CODE
        return {"image": image, "direction": self._direction, "mission": MISSION}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        return self._observation(), {}

    def step(self, action: int) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        reward = float(int(action) == self._direction)
        return self._observation(), reward, False, False, {}


gym.register(
    id=ENV_ID,
    entry_point=f"{__name__}:MiniGridLikeEnv",
    max_episode_steps=EPISODE_STEPS,
    reward_threshold=REWARD_THRESHOLD,
)
