"""A group of environments stepped together by a rollout worker, with its fault policy.

`EnvSplit.step` applies one action per row, resets envs whose episode ended, and writes rewards,
dones, validity flags and next observations straight into the numpy views of a trajectory slot
it is given.

Episode ends. `dones[t] = 1` means "do not bootstrap from the observation written for t + 1":
- termination: the env is reset in the same step, `dones[t] = 1`, and the next episode's first
  observation is written for t + 1;
- truncation (a time limit, not termination): `dones[t] = 0` and the true final observation is
  written for t + 1, so the learner bootstraps from V(final observation), which it computes with
  the current network like every other value. The env is reset on the next step instead of
  being stepped (Gymnasium's NEXT_STEP autoreset): that step ignores its action, has reward 0,
  `dones = 1` and `valids = 0`, so it is never trained on and the value targets pass through it
  unchanged (see `sampleforge.algo.gae`'s conventions on excluded steps). One step per
  truncated episode is spent this way.
A step that ends by termination and truncation at once counts as termination. A row is one agent seat of one env: single-agent envs (`EnvSplit`) have one row
each, multi-agent envs (`MultiAgentEnvSplit`) one per seat, env-major (row = env * seats + seat).

Episode returns and lengths come from the envs' episode-statistics wrapper (single-agent) or are
counted per seat (multi-agent, with the env's "win" outcome). A seat that finished before the
others gets done flags and invalid steps until its env's episode ends, so nothing it "does"
after finishing is trained on.

An env fault is an exception from `step` or `reset`, a non-finite observation or reward, a
reward that is not a number (None, a string, an array of several values; see `faults.py`), or, of
a multi-agent env, results that are not one per seat (observations, rewards, flags, info dicts).
With the "restart" policy the env is rebuilt, the transition is marked invalid (never trained
on) and ends the episode; with "fail" an `EnvFaultError` carrying the original error is raised.
Non-finite values never leave this module: they are replaced by zeros before anyone reads them.
An env that faults `max_consecutive_faults` steps in a row fails the run under either policy
(`EnvFaultError`, one line naming the env and its last fault): restarting it again, or its
worker, would only repeat the fault. Fault warnings are rate-limited (`RateLimitedWarnings`,
one per worker when the rollout worker passes it in).

An observation whose shape is not the one the observation space declares (at the first reset or
any step) is not a fault but a broken env: `EnvFaultError` naming the env and both shapes.

Must not: know about queues, policies or inference.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, cast

import gymnasium as gym
import numpy as np

from sampleforge.buffers.step_validity import Excluded, exclude
from sampleforge.envs.multi_agent import MultiAgentEnv
from sampleforge.envs.registry import (
    EnvContext,
    EnvSpec,
    env_seed,
    make_env,
    observation_shape_problem,
)
from sampleforge.envs.stepping.faults import (
    DEFAULT_MAX_CONSECUTIVE_FAULTS,
    ConsecutiveFaults,
    EnvFaultError,
    RateLimitedWarnings,
    fault_description,
    one_line,
    scalar_reward,
    seat_entries,
    seat_flags,
    seat_infos,
    seat_rewards,
)
from sampleforge.spaces import actions_to_env, observation_to_dict

log = logging.getLogger(__name__)

__all__ = ["EnvFaultError", "EnvSplit", "MultiAgentEnvSplit", "StepOutcome", "StepTargets"]


@dataclass
class StepTargets:
    """Where one step's results go: views into a slot at step t (and t + 1 for observations)."""

    rewards: np.ndarray  # [N]
    dones: np.ndarray  # [N]
    valids: np.ndarray  # [N]
    next_obs: dict[str, np.ndarray]  # key -> [N, ...]


@dataclass
class StepOutcome:
    """What happened in one step besides what was written to the slot."""

    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    episode_rows: list[int] = field(default_factory=list)  # the row of each finished episode
    episode_wins: list[float | None] = field(default_factory=list)
    ended_envs: list[int] = field(default_factory=list)  # envs that start a new episode
    faults: list[str] = field(default_factory=list)

    def record_episode(self, ret: float, length: int, row: int, win: float | None) -> None:
        """A finished episode's statistics, unless its return is not finite: a NaN or inf
        reward on its last step is a fault of that step (`_check_finite`), and one such
        return would make the mean of the next 100 episodes NaN or inf."""
        if not math.isfinite(ret):
            return
        self.episode_returns.append(ret)
        self.episode_lengths.append(length)
        self.episode_rows.append(row)
        self.episode_wins.append(win)


class EnvSplit:
    """`num_envs` single-agent envs of one rollout worker, stepped as a group; see the module
    docstring."""

    seats = 1  # rows per env

    def __init__(
        self,
        *,
        env_spec: EnvSpec,
        worker_index: int,
        first_env_index: int,
        num_envs: int,
        seed: int | None,
        error_policy: str,
        max_consecutive_faults: int = DEFAULT_MAX_CONSECUTIVE_FAULTS,
        fault_warnings: RateLimitedWarnings | None = None,
    ):
        """`fault_warnings`: shared by the splits of one worker (default: this split's own)."""
        self.env_spec = env_spec
        self.contexts = [
            EnvContext(worker_index=worker_index, env_index=first_env_index + i, seed=seed)
            for i in range(num_envs)
        ]
        self.error_policy = error_policy
        self.consecutive_faults = ConsecutiveFaults(num_envs, max_consecutive_faults)
        self.fault_warnings = fault_warnings or RateLimitedWarnings()
        self.envs = [self._build(ctx) for ctx in self.contexts]
        # Envs truncated at the last step: their final observation was written; reset them now.
        self._reset_pending = np.zeros(num_envs, dtype=bool)
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space

    @property
    def num_rows(self) -> int:
        return len(self.envs) * self.seats

    def _build(self, context: EnvContext) -> gym.Env:
        try:
            return make_env(self.env_spec, context)
        except Exception as e:
            raise EnvFaultError(
                f"env {self.env_spec.name!r} could not be created in worker "
                f"{context.worker_index} (env {context.env_index}): {one_line(e)}"
            ) from e

    def __len__(self) -> int:
        return len(self.envs)

    def env_rows(self, i: int) -> slice:
        """The rows of env `i`."""
        return slice(i * self.seats, (i + 1) * self.seats)

    def reset_all(self, next_obs: dict[str, np.ndarray]) -> None:
        """First reset of every env (seeded), observations written into `next_obs`."""
        observations = []
        for env, ctx in zip(self.envs, self.contexts):
            obs, _ = env.reset(seed=env_seed(ctx))
            observations += self._by_seat(obs)
        self._write_checked(observations, next_obs, "at its first reset")
        self._sanitize_obs(next_obs)

    @staticmethod
    def _by_seat(obs: Any) -> list[Any]:
        """An env's observation as a list with one entry per row."""
        return [obs]

    def step(self, actions: np.ndarray, out: StepTargets) -> StepOutcome:
        """Step every env with its row of `actions` [N, A]; results into `out`."""
        outcome = StepOutcome()
        env_actions = actions_to_env(actions, self.action_space)
        observations: list[Any] = []
        out.valids[:] = 1.0
        for i in range(len(self.envs)):
            try:
                if self._reset_pending[i]:
                    obs, reward, done = self._reset_after_truncation(i, outcome), 0.0, True
                    exclude(out.valids, i, Excluded.TRUNCATION_RESET)
                else:
                    obs, reward, done = self._step_env(i, env_actions[i], outcome)
            except Exception as e:  # noqa: BLE001 - the fault policy decides
                obs = self._on_fault(i, fault_description(e), outcome, rebuild=True, cause=e)
                reward, done = 0.0, True
                exclude(out.valids, i, Excluded.ENV_FAULT)
                outcome.ended_envs.append(i)
            out.rewards[i] = reward
            out.dones[i] = done
            observations.append(obs)
        self._write_checked(observations, out.next_obs, "in a step")
        self._check_finite(out, outcome)
        self.consecutive_faults.end_step()
        return outcome

    def _step_env(self, i: int, action: Any, outcome: StepOutcome) -> tuple[Any, float, bool]:
        """Step env `i`; returns the observation to write for t + 1, the reward and whether
        bootstrapping from that observation is cut (see "Episode ends" in the module docstring)."""
        env = self.envs[i]
        obs, raw_reward, terminated, truncated, info = env.step(action)
        reward = scalar_reward(raw_reward)
        if not (terminated or truncated):
            return obs, reward, False
        episode = info.get("episode")
        if episode is not None:
            outcome.record_episode(float(episode["r"]), int(episode["l"]), i, info.get("win"))
        if not terminated:
            self._reset_pending[i] = True
            return obs, reward, False
        outcome.ended_envs.append(i)
        obs, _ = env.reset()
        return obs, reward, True

    def _reset_after_truncation(self, i: int, outcome: StepOutcome) -> Any:
        """The step after env `i`'s truncation: reset it (its action is ignored)."""
        self._reset_pending[i] = False
        outcome.ended_envs.append(i)
        obs, _ = self.envs[i].reset()
        return obs

    def close(self) -> None:
        for env in self.envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - a broken env must not block shutdown
                pass

    # --- faults ---------------------------------------------------------------------------------
    def _on_fault(
        self, i: int, what: str, outcome: StepOutcome, rebuild: bool, cause: Exception | None = None
    ) -> Any:
        """Apply the fault policy to env `i`; returns the reset's observation (a list per seat
        for multi-agent envs)."""
        ctx = self.contexts[i]
        message = (
            f"env {self.env_spec.name!r} failed in worker {ctx.worker_index} "
            f"(env {ctx.env_index}): {what}"
        )
        if self.error_policy == "fail":
            raise EnvFaultError(message) from cause
        if self.consecutive_faults.record(i):
            raise EnvFaultError(self._too_many_faults(ctx, what)) from cause
        self.fault_warnings.warning(f"{message}; restarting it")
        outcome.faults.append(message)
        self._reset_pending[i] = False  # the restart's reset is the new episode's start
        if rebuild:
            try:
                self.envs[i].close()
            except Exception:  # noqa: BLE001
                pass
            self.envs[i] = self._build(ctx)
        try:
            obs, _ = self.envs[i].reset()
        except Exception as e:
            raise EnvFaultError(
                f"env {self.env_spec.name!r} could not be restarted in worker "
                f"{ctx.worker_index} (env {ctx.env_index}): its reset raised {one_line(e)}"
            ) from e
        return obs

    def _too_many_faults(self, ctx: EnvContext, what: str) -> str:
        limit = self.consecutive_faults.limit
        return (
            f"env {self.env_spec.name!r} failed {limit} times in a row in worker "
            f"{ctx.worker_index} (env {ctx.env_index}), last with: {what}; stopping the run "
            f"(max_consecutive_env_faults={limit}: restarting it again would fail the same way)"
        )

    def _check_finite(self, out: StepTargets, outcome: StepOutcome) -> None:
        bad_rewards = ~np.isfinite(out.rewards)
        bad_obs = self._sanitize_obs(out.next_obs)
        bad_rows = np.flatnonzero(bad_rewards | bad_obs)
        for i in sorted({int(r) // self.seats for r in bad_rows}):
            rows = self.env_rows(i)
            what = "non-finite reward" if bad_rewards[rows].any() else "non-finite observation"
            obs = self._on_fault(i, what, outcome, rebuild=False)
            self._write_env_rows(obs, out.next_obs, i)
            self._sanitize_obs(out.next_obs)
            out.rewards[rows] = 0.0
            out.dones[rows] = 1.0
            exclude(out.valids, rows, Excluded.ENV_FAULT)
            outcome.ended_envs.append(i)

    @staticmethod
    def _sanitize_obs(next_obs: dict[str, np.ndarray]) -> np.ndarray:
        """Zero non-finite float observations in place; returns which rows had any."""
        bad = None
        for array in next_obs.values():
            if array.dtype.kind != "f":
                continue
            rows_bad = ~np.isfinite(array.reshape(len(array), -1)).all(axis=1)
            if rows_bad.any():
                array[rows_bad] = np.nan_to_num(array[rows_bad], nan=0.0, posinf=0.0, neginf=0.0)
            bad = rows_bad if bad is None else bad | rows_bad
        if bad is None:
            bad = np.zeros(len(next(iter(next_obs.values()))), dtype=bool)
        return bad

    # --- observations ---------------------------------------------------------------------------
    def _write_checked(self, observations: list, targets: dict[str, np.ndarray], when: str) -> None:
        """`_write_obs`, turning an observation of the wrong shape into a one-line error naming
        the env and both shapes (looked for only once writing failed: nothing on the hot path)."""
        try:
            self._write_obs(observations, targets)
        except (ValueError, TypeError, KeyError, IndexError) as e:
            for row, obs in enumerate(observations):
                problem = observation_shape_problem(obs, self.observation_space)
                if problem is not None:
                    ctx = self.contexts[row // self.seats]
                    raise EnvFaultError(
                        f"env {self.env_spec.name!r} returned {problem} ({when}, worker "
                        f"{ctx.worker_index}, env {ctx.env_index})"
                    ) from e
            raise

    def _write_obs(self, observations: list, targets: dict[str, np.ndarray]) -> None:
        # Box observations are stacked as they are; discrete ones are converted (start offset,
        # range check) like every Dict part.
        if isinstance(self.observation_space, gym.spaces.Box):
            (target,) = targets.values()
            np.stack(observations, out=target)
            return
        as_dicts = [observation_to_dict(o, self.observation_space) for o in observations]
        for key, target in targets.items():
            np.stack([d[key] for d in as_dicts], out=target)

    def _write_row(self, obs: Any, targets: dict[str, np.ndarray], row: int) -> None:
        for key, value in observation_to_dict(obs, self.observation_space).items():
            targets[key][row] = value

    def _write_env_rows(self, obs: Any, targets: dict[str, np.ndarray], i: int) -> None:
        """Write env `i`'s reset observation into its rows."""
        self._write_row(obs, targets, i)


class MultiAgentEnvSplit(EnvSplit):
    """`num_envs` multi-agent envs (`MultiAgentEnv`), one row per seat; see the module
    docstring."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seats = int(self.agent_envs[0].num_agents)
        rows = self.num_rows
        self._seat_done = np.zeros(rows, dtype=bool)
        self._returns = np.zeros(rows, dtype=np.float64)
        self._lengths = np.zeros(rows, dtype=np.int64)

    @property
    def agent_envs(self) -> list[MultiAgentEnv]:
        """`envs` itself (the same list), typed as what it holds: `make_env` returns a checked
        `MultiAgentEnv` for a multi-agent spec, but is typed for single-agent envs."""
        return cast(list[MultiAgentEnv], self.envs)

    def set_reward_shaping(self, i: int, seat: int, coefficients: dict[str, float]) -> None:
        """Reward seat `seat` of env `i` with `coefficients` (its new policy's)."""
        self.agent_envs[i].set_reward_shaping(seat, coefficients)

    @staticmethod
    def _by_seat(obs: Any) -> list[Any]:
        return list(obs)

    def step(self, actions: np.ndarray, out: StepTargets) -> StepOutcome:
        """Step every env with its seats' rows of `actions` [rows, A]; results into `out`."""
        outcome = StepOutcome()
        env_actions = actions_to_env(actions, self.action_space)
        observations: list[Any] = []
        out.valids[:] = 1.0
        for i in range(len(self.agent_envs)):
            rows = self.env_rows(i)
            try:
                if self._reset_pending[i]:
                    obs = self._reset_after_truncation(i, outcome)
                    self._clear_episode(rows)
                    out.rewards[rows], out.dones[rows] = 0.0, 1.0
                    exclude(out.valids, rows, Excluded.TRUNCATION_RESET)
                else:
                    obs = self._step_seats(i, list(env_actions[rows]), out, outcome)
                obs = seat_entries(obs, self.seats, "observations")
            except Exception as e:  # noqa: BLE001 - the fault policy decides
                obs = self._on_fault(i, fault_description(e), outcome, rebuild=True, cause=e)
                self._clear_episode(rows)
                out.rewards[rows] = 0.0
                out.dones[rows] = 1.0
                exclude(out.valids, rows, Excluded.ENV_FAULT)
                outcome.ended_envs.append(i)
            observations += list(obs)
        self._write_checked(observations, out.next_obs, "in a step")
        self._check_finite(out, outcome)
        self.consecutive_faults.end_step()
        return outcome

    def _step_seats(self, i: int, actions: list, out: StepTargets, outcome: StepOutcome) -> Any:
        """Step env `i` with its seats' `actions`, writing its rows of `out`; returns its
        observations for t + 1 (those of its next episode when every seat is done). Everything
        the env returned is checked before any of it is counted, so a broken step is a fault
        that counted nothing."""
        rows = self.env_rows(i)
        finished_before = self._seat_done[rows].copy()
        obs, rewards, terminated, truncated, infos = self.agent_envs[i].step(actions)
        rewards = seat_rewards(rewards, self.seats)
        terminated = seat_flags(terminated, self.seats, "terminated")
        truncated = seat_flags(truncated, self.seats, "truncated") & ~terminated
        infos = seat_infos(infos, self.seats)
        obs = seat_entries(obs, self.seats, "observations")
        # A seat that was already done has nothing left to learn from in this episode.
        out.rewards[rows] = np.where(finished_before, 0.0, rewards)
        exclude(out.valids[rows], finished_before, Excluded.SEAT_OUT_OF_PLAY)  # a view
        self._count(
            rows, out.rewards[rows], terminated | truncated, finished_before, infos, outcome
        )
        # A truncated seat bootstraps from its final observation (module docstring).
        out.dones[rows] = np.logical_or(terminated, finished_before)
        if self._seat_done[rows].all():
            obs = self._end_episode(i, obs, truncated & ~finished_before, outcome)
        return obs

    def _end_episode(
        self, i: int, final_obs: Any, truncated_now: np.ndarray, outcome: StepOutcome
    ) -> Any:
        """Every seat of env `i` is done: reset it now, or on the next step when a seat was
        truncated in this one (its final observation must be seen); returns what to write."""
        if truncated_now.any():
            self._reset_pending[i] = True
            return final_obs
        obs, _ = self.envs[i].reset()
        self._seat_done[self.env_rows(i)] = False
        outcome.ended_envs.append(i)
        return obs

    def _count(
        self,
        rows: slice,
        rewards: np.ndarray,
        done: np.ndarray,
        finished_before: np.ndarray,
        infos: list[dict],
        outcome: StepOutcome,
    ) -> None:
        """Episode statistics per seat: a seat's episode ends on its first done step."""
        playing = ~finished_before
        self._returns[rows] += np.where(playing, rewards, 0.0)
        self._lengths[rows] += playing
        for seat in np.flatnonzero(playing & done):
            row = rows.start + int(seat)
            outcome.record_episode(
                float(self._returns[row]), int(self._lengths[row]), row, infos[seat].get("win")
            )
            self._returns[row], self._lengths[row] = 0.0, 0
            self._seat_done[row] = True

    def _clear_episode(self, rows: slice) -> None:
        self._seat_done[rows] = False
        self._returns[rows] = 0.0
        self._lengths[rows] = 0

    def _write_env_rows(self, obs: Any, targets: dict[str, np.ndarray], i: int) -> None:
        self._clear_episode(self.env_rows(i))
        for seat, seat_obs in enumerate(obs):
            self._write_row(seat_obs, targets, i * self.seats + seat)
