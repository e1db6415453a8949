"""Environments that fail on purpose: for sampleforge's fault-tolerance tests and your own drills.

`FaultyEnv` is a tiny, fast, pure-numpy env (guess the sign of the first observation; episodes
of `episode_length` steps) that misbehaves in one configurable way:

| fault | what happens |
| --- | --- |
| "none" | nothing: a well-behaved env (a baseline, or for process-fault drills) |
| "raise_in_step" | `step` raises `InjectedFault` |
| "hang_in_step" | `step` sleeps `hang_seconds` (default 1000 s): a stuck simulator |
| "nan_obs" | `step` returns an observation containing NaN |
| "inf_reward" | `step` returns an infinite reward |
| "raise_in_init_in_workers" | the constructor raises `InjectedFault`, but only in a child process (a rollout worker), never in the runner's own process, which builds one env to read the spaces |
| "wrong_obs_shape" | every observation, from the first reset on, has one element more than the observation space declares |

When the step faults fire (`wrong_obs_shape` is not a step fault: it always applies): at the env's `after_steps`-th step (counted from construction, across
episodes), and then every `every` steps if `every` is given. `only_worker` / `only_env` limit the
fault to envs with that worker / env index.

`once_marker` (a file path) makes a fault fire once across the whole run, across processes and
across env rebuilds: an env that is due to fault first claims the marker with
`os.open(path, O_CREAT | O_EXCL)`; only the one that created the file faults, every other env
(and every later instance, e.g. the rebuilt env or a replacement worker's) carries on normally.
The marker file holds JSON describing the firing (fault, worker, env, pid, step, wall time
`time.time()`); read it with `read_marker(path)` to check where and when the fault fired.

`step_log` (a file path) has every env append one byte to it per step, across processes: the
steps the envs took, for a test to compare with what the runner counted.

`helper_process_dir` (a folder) makes every env built in a worker process start a helper
process (`sleep`), as envs that drive a simulator binary do (ViZDoom's engine), and record it
there: a file named after the helper's pid, holding its worker's pid. `close()` stops it; a
worker that dies without closing leaves it to the runner (`comms/group_guard.py`).

Worker processes receive the resolved `EnvSpec` pickled, so the factory is a `functools.partial`
of the top-level `make_faulty_env`; `register_faulty_env` does that for you:

    from sampleforge.testing import register_faulty_env
    env = register_faulty_env("drill_raise", fault="raise_in_step", after_steps=200,
                              once_marker="/tmp/drill_raise.marker")
    Runner(make_config(env=env, ...)).train()      # one env fault, logged and restarted

Must not: import the runner or any component; depend on anything but numpy and gymnasium.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from sampleforge.envs.registry import EnvContext, register_env

FAULTS = (
    "none",
    "raise_in_step",
    "hang_in_step",
    "nan_obs",
    "inf_reward",
    "raise_in_init_in_workers",
    "wrong_obs_shape",
)

__all__ = [
    "FAULTS",
    "FaultyEnv",
    "InjectedFault",
    "claim_marker",
    "make_faulty_env",
    "read_marker",
    "register_faulty_env",
]


class InjectedFault(RuntimeError):
    """The error a `FaultyEnv` raises on purpose."""


def claim_marker(path: str | os.PathLike, record: dict[str, Any]) -> bool:
    """Atomically create the marker file at `path` holding `record` as JSON.

    Returns True for exactly one caller across all processes; False if it already exists.
    """
    try:
        fd = os.open(os.fspath(path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
        f.flush()
        os.fsync(f.fileno())
    return True


def read_marker(path: str | os.PathLike) -> dict[str, Any] | None:
    """The record of the fault that claimed `path`, or None if no fault fired (yet)."""
    path = Path(path)
    # The claimant creates the file before writing it: allow it a moment to finish.
    for _ in range(100):
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        if text:
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                pass
        time.sleep(0.01)
    raise RuntimeError(f"marker {path} exists but holds no complete record")


def _in_child_process() -> bool:
    return multiprocessing.parent_process() is not None


class FaultyEnv(gym.Env):
    """Guess-the-sign env with an injected fault; see the module docstring."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        fault: str = "none",
        *,
        once_marker: str | None = None,
        after_steps: int = 0,
        every: int | None = None,
        only_worker: int | None = None,
        only_env: int | None = None,
        hang_seconds: float = 1000.0,
        helper_process_dir: str | None = None,
        step_log: str | None = None,
        episode_length: int = 50,
        obs_size: int = 4,
        worker_index: int = 0,
        env_index: int = 0,
    ):
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose one of {', '.join(FAULTS)}")
        if after_steps < 0 or (every is not None and every < 1):
            raise ValueError("after_steps must be >= 0 and every >= 1 (or None)")
        self.fault = fault
        self.once_marker = None if once_marker is None else os.fspath(once_marker)
        self.after_steps = after_steps
        self.every = every
        self.hang_seconds = hang_seconds
        self.episode_length = episode_length
        self.worker_index = worker_index
        self.env_index = env_index
        self._targeted = (only_worker is None or only_worker == worker_index) and (
            only_env is None or only_env == env_index
        )
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (obs_size,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.total_steps = 0  # since construction, across episodes
        self.faults_fired = 0
        self._t = 0
        self._obs = np.zeros(obs_size, np.float32)
        # What `_draw` returns: the declared shape, or one element more.
        self._obs_shape = (obs_size + (fault == "wrong_obs_shape" and self._targeted),)
        self._helper = _start_helper(helper_process_dir) if helper_process_dir else None
        self._step_log = None if step_log is None else os.fspath(step_log)
        if (
            fault == "raise_in_init_in_workers"
            and self._targeted
            and _in_child_process()
            and self._fire()
        ):
            raise InjectedFault(
                f"injected fault: construction of FaultyEnv failed in worker "
                f"{worker_index} (env {env_index}, pid {os.getpid()})"
            )

    # --- gym API --------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._obs = self._draw()
        return self._obs.copy(), {}

    def step(self, action):
        self.total_steps += 1
        self._t += 1
        reward = 1.0 if int(action) == int(self._obs[0] > 0) else 0.0
        self._obs = self._draw()
        obs = self._obs.copy()
        if self._due() and self._fire():
            where = (
                f"worker {self.worker_index} (env {self.env_index}), step "
                f"{self.total_steps}, pid {os.getpid()}"
            )
            if self.fault == "raise_in_step":
                raise InjectedFault(f"injected fault: step raised in {where}")
            if self.fault == "hang_in_step":
                time.sleep(self.hang_seconds)
            elif self.fault == "nan_obs":
                obs[0] = np.nan
            elif self.fault == "inf_reward":
                reward = float("inf")
        if self._step_log is not None:  # after a hang: the step is taken once it returns
            with open(self._step_log, "ab") as log:
                log.write(b".")
        terminated = self._t >= self.episode_length
        return obs, reward, terminated, False, {}

    def close(self) -> None:
        if self._helper is not None:
            self._helper.kill()
            self._helper.wait()
            self._helper = None

    # --- faults ---------------------------------------------------------------------------------
    def _due(self) -> bool:
        if (
            self.fault in ("none", "raise_in_init_in_workers", "wrong_obs_shape")
            or not self._targeted
        ):
            return False
        n = self.total_steps - self.after_steps
        if n == 0:
            return True
        return n > 0 and self.every is not None and n % self.every == 0

    def _fire(self) -> bool:
        """Decide whether this env faults now (claiming the once-marker if there is one)."""
        if self.once_marker is not None:
            if os.path.exists(self.once_marker):
                return False  # cheap check first: somebody already fired
            record = {
                "fault": self.fault,
                "worker": self.worker_index,
                "env": self.env_index,
                "pid": os.getpid(),
                "step": self.total_steps,
                "time": time.time(),
            }
            if not claim_marker(self.once_marker, record):
                return False
        self.faults_fired += 1
        return True

    def _draw(self) -> np.ndarray:
        return self.np_random.uniform(-1.0, 1.0, self._obs_shape).astype(np.float32)


def _start_helper(directory: str) -> subprocess.Popen | None:
    """In a worker process: a long-lived child process, recorded in `directory`."""
    if not _in_child_process():
        return None
    helper = subprocess.Popen(["sleep", "3600"])
    (Path(directory) / str(helper.pid)).write_text(str(os.getpid()))
    return helper


def make_faulty_env(context: EnvContext, **fault_kwargs: Any) -> FaultyEnv:
    """Registry factory: a `FaultyEnv` for `context` (keyword arguments as `FaultyEnv`'s)."""
    return FaultyEnv(worker_index=context.worker_index, env_index=context.env_index, **fault_kwargs)


def register_faulty_env(name: str, **fault_kwargs: Any) -> str:
    """Register a `FaultyEnv` (with `FaultyEnv`'s keyword arguments) under `name`; returns
    `name`, ready for `make_config(env=name)`. Replaces an earlier registration of `name`."""
    fault = fault_kwargs.get("fault", "none")
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; choose one of {', '.join(FAULTS)}")
    register_env(
        name,
        functools.partial(make_faulty_env, **fault_kwargs),
        overwrite=True,
        description=f"FaultyEnv with fault {fault!r} (sampleforge.testing)",
    )
    return name
