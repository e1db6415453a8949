"""Running whole evaluation episodes with a local policy, repeatably.

Responsibility: play a given list of episodes, several envs at a time with one batched forward
pass per step, and collect each episode's true return and length. Episode ``i`` is always
reset with the same seed (derived from the evaluation seed and ``i``), whichever env, process
or batch plays it, so with a deterministic policy the results do not depend on how the
episodes are spread.

An episode ends when the env reports its statistics (``info["episode"]``, added by
``make_env``); an env that terminates without them (Atari's episodic life: a life was lost) is
reset and the same episode goes on, as in training.

Must not: train, load weights from disk, or start processes (``parallel.py`` does).
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sampleforge.envs.registry import EnvContext, EnvSpec, make_env
from sampleforge.evaluation.local_policy import LocalPolicy

DEFAULT_NUM_ENVS = 8
# The SeedSequence key of evaluation episodes: a worker index training never uses, so
# evaluation episodes do not replay the training envs' first episodes.
_EVALUATION_STREAM = 2**31 - 1


def episode_seed(seed: int | None, episode: int) -> int | None:
    """The reset seed of evaluation episode `episode` (None: unseeded)."""
    if seed is None:
        return None
    sequence = np.random.SeedSequence(seed, spawn_key=(_EVALUATION_STREAM, episode))
    return int(sequence.generate_state(1, dtype=np.uint32)[0])


@dataclass(frozen=True)
class EvaluationResult:
    """Returns and lengths (agent steps) of evaluation episodes, in episode order."""

    returns: tuple[float, ...]
    lengths: tuple[int, ...]

    @property
    def num_episodes(self) -> int:
        return len(self.returns)

    @property
    def mean_return(self) -> float:
        return statistics.fmean(self.returns) if self.returns else math.nan

    @property
    def std_return(self) -> float:
        """Population standard deviation of the returns."""
        return statistics.pstdev(self.returns) if self.returns else math.nan

    @property
    def min_return(self) -> float:
        return min(self.returns) if self.returns else math.nan

    @property
    def max_return(self) -> float:
        return max(self.returns) if self.returns else math.nan

    @property
    def mean_length(self) -> float:
        return statistics.fmean(self.lengths) if self.lengths else math.nan

    def summary(self) -> dict[str, float]:
        """{episodes, mean, std, min, max, mean_length} as plain numbers."""
        return {
            "episodes": self.num_episodes,
            "mean": self.mean_return,
            "std": self.std_return,
            "min": self.min_return,
            "max": self.max_return,
            "mean_length": self.mean_length,
        }

    @staticmethod
    def from_episodes(results: Iterable[tuple[int, float, int]]) -> "EvaluationResult":
        """From (episode index, return, length) triples in any order."""
        ordered = sorted(results)
        return EvaluationResult(
            returns=tuple(float(r) for _, r, _ in ordered),
            lengths=tuple(int(n) for _, _, n in ordered),
        )


class EpisodeRunner:
    """Plays `episodes` (indices) with `policy`, `num_envs` envs at a time.

    `on_frame(frame)` receives every rendered frame of the first env (which then plays the
    episodes one after another): pass `render_mode="rgb_array"` and `num_envs=1` to record them.
    """

    def __init__(
        self,
        policy: LocalPolicy,
        env_spec: EnvSpec,
        episodes: Sequence[int],
        *,
        seed: int | None = None,
        deterministic: bool = True,
        num_envs: int = DEFAULT_NUM_ENVS,
        render_mode: str | None = None,
        on_frame: Callable[[Any], None] | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs: {num_envs} must be >= 1")
        self.policy = policy
        self.seed = seed
        self.deterministic = deterministic
        self.on_frame = on_frame
        self._pending = deque(episodes)
        count = max(1, min(num_envs, len(self._pending)))
        self._envs = [
            make_env(env_spec, EnvContext(env_index=i, render_mode=render_mode))
            for i in range(count)
        ]
        self._episode: list[int | None] = [None] * count
        self._obs: list[Any] = [None] * count
        self._return = [0.0] * count
        self._length = [0] * count
        self._states = policy.initial_state(count)
        self.results: list[tuple[int, float, int]] = []
        for i in range(count):
            self._start_next(i)

    @property
    def done(self) -> bool:
        """Every episode has finished."""
        return all(episode is None for episode in self._episode)

    def run(self, max_seconds: float | None = None) -> bool:
        """Step until every episode finished (or `max_seconds` passed); returns `done`."""
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        while not self.done:
            self.step()
            if deadline is not None and time.monotonic() >= deadline:
                break
        return self.done

    def step(self) -> None:
        """One step of every env that is playing an episode."""
        active = [i for i, episode in enumerate(self._episode) if episode is not None]
        if not active:
            return
        index = torch.tensor(active)
        actions, new_states = self.policy.act(
            [self._obs[i] for i in active], self._states[index], self.deterministic
        )
        self._states[index] = new_states.to(self._states.dtype)
        for i, action in zip(active, actions):
            self._step_env(i, action)

    def result(self) -> EvaluationResult:
        """The finished episodes so far, in episode order."""
        return EvaluationResult.from_episodes(self.results)

    def close(self) -> None:
        for env in self._envs:
            env.close()

    def __enter__(self) -> "EpisodeRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- per env --------------------------------------------------------------------------------
    def _step_env(self, i: int, action: Any) -> None:
        env = self._envs[i]
        obs, reward, terminated, truncated, info = env.step(action)
        self._return[i] += float(reward)
        self._length[i] += 1
        self._obs[i] = obs
        self._emit_frame(i)
        if not (terminated or truncated):
            return
        if "episode" in info:  # the real episode ended
            record = info["episode"]
            episode = self._episode[i]
            assert episode is not None  # only envs playing an episode are stepped
            self.results.append((episode, float(record["r"]), int(record["l"])))
            self._start_next(i)
        else:  # a life ended, the game did not: go on with the same episode
            self._obs[i], _ = env.reset()
            self._states[i] = 0.0

    def _start_next(self, i: int) -> None:
        if not self._pending:
            self._episode[i] = None
            return
        episode = self._pending.popleft()
        self._episode[i] = episode
        self._obs[i], _ = self._envs[i].reset(seed=episode_seed(self.seed, episode))
        self._return[i], self._length[i] = 0.0, 0
        self._states[i] = 0.0
        self._emit_frame(i)

    def _emit_frame(self, i: int) -> None:
        if self.on_frame is not None and i == 0:
            self.on_frame(self._envs[0].render())


def run_episodes(
    policy: LocalPolicy,
    env_spec: EnvSpec,
    num_episodes: int,
    *,
    seed: int | None = None,
    deterministic: bool = True,
    num_envs: int = DEFAULT_NUM_ENVS,
    first_episode: int = 0,
) -> EvaluationResult:
    """Play episodes `first_episode` .. `first_episode + num_episodes - 1` to the end.

    With a `seed`, stochastic action sampling is seeded too (torch's global generator is
    restored afterwards), so the same weights give the same results.
    """
    if num_episodes < 1:
        raise ValueError(f"num_episodes: {num_episodes} must be >= 1")
    episodes = range(first_episode, first_episode + num_episodes)
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        with EpisodeRunner(
            policy, env_spec, episodes, seed=seed, deterministic=deterministic, num_envs=num_envs
        ) as runner:
            runner.run()
            return runner.result()
