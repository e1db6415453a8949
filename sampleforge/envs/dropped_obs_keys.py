"""The ``drop_obs_keys`` setting: an env whose Dict observations lose some keys.

Responsible for: the observation wrapper ``make_env`` puts around an env when its spec names keys
to drop (a MiniGrid-like ``mission`` string the models cannot take), so that every consumer of the
env (the runner's probe, rollout workers, enjoy, eval, export) sees the same reduced space.

Must not: encode or reshape the keys it keeps (the models one-hot discrete parts themselves), or
decide which keys to drop (the config does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from sampleforge.spaces import without_keys


class DropObservationKeys(gym.ObservationWrapper):
    """``env`` with ``keys`` removed from its Dict observations and observation space.

    Raises ``UnsupportedSpaceError`` (one line naming the env, the key and the keys there are)
    when ``env``'s observations are not a Dict, lack one of ``keys``, or would keep no key.
    """

    def __init__(self, env: gym.Env, keys: Sequence[str], env_name: str) -> None:
        super().__init__(env)
        self.dropped_keys = tuple(keys)
        self.observation_space = without_keys(env.observation_space, self.dropped_keys, env_name)
        self._kept = tuple(self.observation_space.spaces)

    def observation(self, observation: Any) -> dict[str, Any]:
        return {key: observation[key] for key in self._kept}
