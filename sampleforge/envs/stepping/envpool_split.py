"""A rollout worker's group of envs as ONE EnvPool batch, stepped with one C++ call per step.

`EnvPoolSplit` is a drop-in for `EnvSplit` (the same methods and attributes the rollout worker
uses: `step`, `reset_all`, `num_rows`, `seats`, `env_rows`, `contexts`, `close`, `len()`) for
specs whose factory is an `EnvPoolFactory` (`envpool:<task id>` names). It owns one synchronous
EnvPool of `num_envs` envs, seeded per env with `env_seed` of each env's context, and writes the
batch's observations, rewards and done flags straight into the slot views of `StepTargets`.
Episode returns and lengths are counted here (`EpisodeTracker`): for Atari, the true unclipped
game return from EnvPool's `info["reward"]`, reported at game over (or truncation), not at each
lost life.

Auto-reset. EnvPool resets an env whose episode ended on the *next* step call, ignoring that
call's action for it (Gymnasium's NEXT_STEP mode). That reset is EnvPool's own and the one that
knows about episodic life: after a lost life it continues the game, whereas an explicit
`reset(env_id)` restarts it. The buffers want what `EnvSplit` gives them: the observation
written for t + 1 after a done step is the next episode's first one, and every transition in the
slot is real. So right after a step in which envs D ended, D alone are stepped once more (a
partial step, `step(noop, env_id=D)`, which synchronous mode allows): EnvPool runs its own
reset for them, ignores the no-op, and their first observations overwrite their rows of
`next_obs`. The batch is stepped in one call; a second, partial call happens only on steps where
some episode ended. The done step keeps the env's own reward and done flag, its terminal
observation is never written (the done flag stops bootstrapping from it), and no action the
policy chose is ever ignored. (The alternative, writing the terminal observation and letting
the next batch step reset D, would put a step whose action EnvPool ignores into every episode:
an invalid row, a wasted inference and a recurrent state fed the old episode's last frame.)

Truncation is the exception, as in `EnvSplit` (see "Episode ends" there): the learner must
bootstrap from a truncated episode's true final observation. So an env truncated (and not
terminated) at step t gets `dones[t] = 0` and its final observation written for t + 1, and is
not stepped at once: the next batch step resets it the EnvPool way, ignoring its action, and
that step is written with reward 0, `dones = 1` and `valids = 0`.

Faults, with `EnvSplit`'s policy shape. An exception from EnvPool concerns the whole batch:
with "restart" the pool is rebuilt and reset, every row of that step is marked invalid and
done, and one fault line per env is reported; with "fail" an `EnvFaultError` is raised. A
non-finite reward or float observation is zeroed (inherited `_check_finite`), and its env is
reset (an explicit reset: a fresh game) with its step marked invalid and done. As in `EnvSplit`,
`max_consecutive_faults` faults in a row (of one env, or of the batch) fail the run, and fault
warnings are rate-limited.

Must not: know about queues, policies or inference; import envpool itself (the factory does).
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import numpy as np

from sampleforge.buffers.step_validity import Excluded, exclude
from sampleforge.envs.envpool_env import EnvPoolFactory, EnvPoolUnavailableError, batch_seeds
from sampleforge.envs.registry import EnvContext, EnvSpec
from sampleforge.envs.stepping.env_split import EnvFaultError, EnvSplit, StepOutcome, StepTargets
from sampleforge.envs.stepping.faults import (
    DEFAULT_MAX_CONSECUTIVE_FAULTS,
    ConsecutiveFaults,
    RateLimitedWarnings,
    one_line,
)
from sampleforge.spaces import actions_to_env

log = logging.getLogger(__name__)


class EnvPoolSplit(EnvSplit):
    """`num_envs` envs of one EnvPool batch; see the module docstring.

    Shares `EnvSplit`'s row layout, non-finite checks and row writing; replaces how envs are
    built, reset, stepped and restarted. It has no `envs` list: the pool is `self.pool`.
    """

    seats = 1

    def __init__(
        self,
        *,
        env_spec: EnvSpec,
        worker_index: int,
        first_env_index: int,
        num_envs: int,
        seed: int | None,
        error_policy: str,
        num_threads: int | None = None,
        max_consecutive_faults: int = DEFAULT_MAX_CONSECUTIVE_FAULTS,
        fault_warnings: RateLimitedWarnings | None = None,
    ):
        """Build the pool; `num_threads` defaults to one per env, at most one per core."""
        if not isinstance(env_spec.factory, EnvPoolFactory):
            raise TypeError(
                f"env {env_spec.name!r} is not an EnvPool env (its factory is "
                f"{type(env_spec.factory).__name__}); use EnvSplit"
            )
        self.env_spec = env_spec
        self.factory: EnvPoolFactory = env_spec.factory
        self.contexts = [
            EnvContext(worker_index=worker_index, env_index=first_env_index + i, seed=seed)
            for i in range(num_envs)
        ]
        self.error_policy = error_policy
        self.consecutive_faults = ConsecutiveFaults(num_envs, max_consecutive_faults)
        self.fault_warnings = fault_warnings or RateLimitedWarnings()
        self._seeds = batch_seeds(self.contexts)
        self._overrides = {} if num_threads is None else {"num_threads": num_threads}
        self.pool = self._build_pool()
        self.observation_space = self.pool.observation_space  # of one env
        self.action_space = self.pool.action_space
        self._is_dict = isinstance(self.observation_space, gym.spaces.Dict)
        self._env_ids = np.arange(num_envs, dtype=np.int32)
        assert self.action_space.shape is not None  # EnvPool's action spaces are Box or Discrete
        self._noop = np.zeros((num_envs, *self.action_space.shape), self.action_space.dtype)
        self._tracker = self.factory.episode_tracker(num_envs)
        # Envs truncated at the last step, which EnvPool resets in the next batch step.
        self._reset_pending = np.zeros(num_envs, dtype=bool)

    @property
    def num_rows(self) -> int:
        return len(self.contexts)

    def __len__(self) -> int:
        return len(self.contexts)

    def _build_pool(self) -> Any:
        try:
            return self.factory.make_batch(len(self.contexts), self._seeds, **self._overrides)
        except EnvPoolUnavailableError:
            raise  # says why envpool is missing; not an env fault
        except Exception as e:
            ctx = self.contexts[0]
            raise EnvFaultError(
                f"env {self.env_spec.name!r} could not be created in worker "
                f"{ctx.worker_index} (envs {ctx.env_index}.."
                f"{self.contexts[-1].env_index}): {one_line(e)}"
            ) from e

    def reset_all(self, next_obs: dict[str, np.ndarray]) -> None:
        """First reset of every env (seeded when the pool was built), into `next_obs`."""
        obs, info = self.pool.reset()
        self._write_rows(obs, np.asarray(info["env_id"]), next_obs)
        self._sanitize_obs(next_obs)
        self._tracker.clear(slice(None))
        self._reset_pending = np.zeros(len(self.contexts), dtype=bool)

    def step(self, actions: np.ndarray, out: StepTargets) -> StepOutcome:
        """Step every env with its row of `actions` [N, A] in one EnvPool call; results into
        `out` (plus one partial call to reset envs whose episode ended)."""
        outcome = StepOutcome()
        out.valids[:] = 1.0
        try:
            self._step_batch(actions, out, outcome)
        except Exception as e:  # noqa: BLE001 - the fault policy decides
            self._restart_pool(one_line(e), e, outcome, out)
        else:
            self._check_finite(out, outcome)
        self.consecutive_faults.end_step()
        return outcome

    def close(self) -> None:
        try:
            self.pool.close()
        except Exception:  # noqa: BLE001 - a broken pool must not block shutdown
            pass

    # --- stepping -------------------------------------------------------------------------------
    def _step_batch(self, actions: np.ndarray, out: StepTargets, outcome: StepOutcome) -> None:
        resetting = np.flatnonzero(self._reset_pending)  # EnvPool resets these in this call
        self._reset_pending[:] = False
        obs, reward, terminated, truncated, info = self.pool.step(
            self._batch_actions(actions), self._env_ids
        )
        ids = np.asarray(info["env_id"])  # the row of each result
        terminated = np.asarray(terminated, dtype=bool)
        self._write_rows(obs, ids, out.next_obs)
        out.rewards[ids] = reward
        out.dones[ids] = terminated  # a truncated env bootstraps from its final observation
        for episode in self._tracker.update(ids, reward, terminated, truncated, info):
            outcome.episode_returns.append(episode.episode_return)
            outcome.episode_lengths.append(episode.length)
            outcome.episode_rows.append(episode.env_id)
            outcome.episode_wins.append(None)
        if resetting.size:
            self._mark_reset_step(resetting, out, outcome)
        self._reset_pending[ids[np.asarray(truncated, dtype=bool) & ~terminated]] = True
        ended = ids[terminated].astype(np.int32)
        if ended.size:
            self._auto_reset(ended, out.next_obs)
            outcome.ended_envs.extend(ended.tolist())

    def _mark_reset_step(self, reset: np.ndarray, out: StepTargets, outcome: StepOutcome) -> None:
        """EnvPool reset `reset` in this step, after their truncation: nothing to learn from."""
        out.rewards[reset] = 0.0
        out.dones[reset] = 1.0
        exclude(out.valids, reset, Excluded.TRUNCATION_RESET)
        self._tracker.clear(reset)  # the new episode starts with the next step
        outcome.ended_envs.extend(reset.tolist())

    def _auto_reset(self, ended: np.ndarray, next_obs: dict[str, np.ndarray]) -> None:
        """Let EnvPool reset `ended` its own way now (see the module docstring)."""
        obs, _, _, _, info = self.pool.step(self._noop[ended], ended)
        self._write_rows(obs, np.asarray(info["env_id"]), next_obs)

    def _batch_actions(self, actions: np.ndarray) -> np.ndarray:
        """Policy actions [N, A] as the batch EnvPool expects (one entry per env)."""
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            return (actions[:, 0] + int(space.start)).astype(np.int32)
        if isinstance(space, gym.spaces.Box):
            clipped = np.clip(actions, space.low.reshape(-1), space.high.reshape(-1))
            return clipped.astype(space.dtype, copy=False).reshape(len(actions), *space.shape)
        return np.stack([np.asarray(a) for a in actions_to_env(actions, space)])

    def _write_rows(self, obs: Any, ids: np.ndarray, targets: dict[str, np.ndarray]) -> None:
        """Write a batch's observations (env `ids[k]` -> row `ids[k]`) into `targets`."""
        if self._is_dict:
            for key, target in targets.items():
                target[ids] = obs[key]
        else:
            (target,) = targets.values()
            target[ids] = obs  # casts, e.g. MuJoCo's float64 into the float32 buffer

    # --- faults ---------------------------------------------------------------------------------
    def _message(self, ctx: EnvContext, what: str) -> str:
        return (
            f"env {self.env_spec.name!r} failed in worker {ctx.worker_index} "
            f"(env {ctx.env_index}): {what}"
        )

    def _on_fault(
        self, i: int, what: str, outcome: StepOutcome, rebuild: bool, cause: Exception | None = None
    ) -> Any:
        """Env `i` gave non-finite data: fail, or reset it (a fresh game) and return its first
        observation. (`rebuild` is EnvSplit's; a single env of a pool cannot be rebuilt.)"""
        message = self._message(self.contexts[i], what)
        if self.error_policy == "fail":
            raise EnvFaultError(message) from cause
        if self.consecutive_faults.record(i):
            raise EnvFaultError(self._too_many_faults(self.contexts[i], what)) from cause
        self.fault_warnings.warning(f"{message}; restarting it")
        outcome.faults.append(message)
        self._reset_pending[i] = False
        obs, _ = self.pool.reset(np.array([i], dtype=np.int32))
        self._tracker.clear([i])
        return _env_zero(obs)

    def _restart_pool(
        self, what: str, cause: Exception, outcome: StepOutcome, out: StepTargets
    ) -> None:
        """EnvPool raised: fail, or rebuild and reset the whole batch, this step invalid."""
        messages = [
            self._message(ctx, what + " (the whole EnvPool batch is restarted)")
            for ctx in self.contexts
        ]
        if self.error_policy == "fail":
            raise EnvFaultError(messages[0]) from cause
        if self.consecutive_faults.record_all():
            raise EnvFaultError(self._too_many_faults(self.contexts[0], what)) from cause
        self.fault_warnings.warning(f"{messages[0]}; restarting {len(self.contexts)} envs")
        outcome.faults.extend(messages)
        self.close()
        self.pool = self._build_pool()
        self.reset_all(out.next_obs)
        out.rewards[:] = 0.0
        out.dones[:] = 1.0
        exclude(out.valids, slice(None), Excluded.ENV_FAULT)
        outcome.ended_envs.extend(range(len(self.contexts)))


def _env_zero(obs: Any) -> Any:
    """The first env's observation of a batch (a dict of batches for Dict spaces)."""
    if isinstance(obs, dict):
        return {key: value[0] for key, value in obs.items()}
    return obs[0]
