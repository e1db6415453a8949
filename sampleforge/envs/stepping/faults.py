"""What counts as an env fault, how many in a row an env may have, and how they are logged.

- `EnvFaultError`: an env failed and the run must stop (the "fail" policy, a fault bound reached,
  an env that breaks its own contract). Its message is one line naming the env.
- `ConsecutiveFaults`: per env, faults in a row. An env that fails at every step would
  otherwise be restarted for ever, logging each time and training on nothing; a worker
  replaced by the supervisor would fail the same way, so the bound fails the run.
- `RateLimitedWarnings`: the first few warnings as they come, then at most one per interval,
  saying how many were left out.
- `scalar_reward` / `seat_rewards`: a reward that is not a number (None, a string, an array of
  several values) is a fault like a raise, with a message saying what the env returned.

Must not: step envs or know about queues, policies or processes.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Callable

import numpy as np

log = logging.getLogger(__name__)
# Settings' defaults (the config schema's `max_consecutive_env_faults` repeats the first).
DEFAULT_MAX_CONSECUTIVE_FAULTS = 100
WARNINGS_BURST = 5
WARNINGS_INTERVAL_SEC = 30.0


class EnvFaultError(RuntimeError):
    """An env failed and the policy is to fail the run."""


class BadEnvOutputError(ValueError):
    """An env returned something that breaks its contract (a reward that is not a number)."""


def one_line(error: BaseException) -> str:
    """`Type: message` of `error` on one line (exception messages may span several)."""
    return " ".join(f"{type(error).__name__}: {error}".split())


def fault_description(error: BaseException) -> str:
    """What went wrong, for a fault message: a contract breach says it in its own words."""
    if isinstance(error, BadEnvOutputError):
        return " ".join(str(error).split())
    return one_line(error)


class ConsecutiveFaults:
    """Faults in a row of each of `num_envs` envs, against a bound.

    Call `record(i)` for each fault of env `i` (True when the bound is reached) and
    `end_step()` once per step: every env that did not fault in that step starts from zero.
    """

    def __init__(self, num_envs: int, limit: int = DEFAULT_MAX_CONSECUTIVE_FAULTS) -> None:
        if limit < 1:
            raise ValueError(f"max_consecutive_env_faults must be >= 1, got {limit}")
        self.limit = limit
        self.counts = np.zeros(num_envs, dtype=np.int64)
        self._faulted = np.zeros(num_envs, dtype=bool)

    def record(self, i: int) -> bool:
        """One more fault of env `i`; True if it has now failed `limit` times in a row."""
        self._faulted[i] = True
        self.counts[i] += 1
        return bool(self.counts[i] >= self.limit)

    def record_all(self) -> bool:
        """A fault of every env at once (a batch that failed as a whole)."""
        return any([self.record(i) for i in range(len(self.counts))])

    def end_step(self) -> None:
        self.counts[~self._faulted] = 0
        self._faulted[:] = False


class RateLimitedWarnings:
    """Logs the first `burst` warnings as they come, then at most one every `interval_sec`;
    a logged warning says how many were left out since the one before."""

    def __init__(
        self,
        logger: logging.Logger = log,
        *,
        burst: int = WARNINGS_BURST,
        interval_sec: float = WARNINGS_INTERVAL_SEC,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.burst = burst
        self.interval_sec = interval_sec
        self._clock = clock
        self.logged = 0
        self.suppressed = 0  # since the last logged warning
        self._last = -math.inf

    def warning(self, message: str) -> None:
        now = self._clock()
        if self.logged >= self.burst and now - self._last < self.interval_sec:
            self.suppressed += 1
            return
        if self.suppressed:
            message = (
                f"{message} [{self.suppressed} more like it in the last "
                f"{now - self._last:.0f} s not logged]"
            )
        self.logger.warning("%s", message)
        self.logged += 1
        self.suppressed = 0
        self._last = now


def scalar_reward(raw: Any) -> float:
    """One env's reward as a float; BadEnvOutputError if it is not one number."""
    if isinstance(raw, (int, float, np.number)):  # the hot path: no array made
        return float(raw)
    if raw is None or isinstance(raw, (str, bytes)):
        raise BadEnvOutputError(f"returned reward of type {type(raw).__name__}; expected a number")
    value = _numeric_array(raw, "reward", "a number")
    if value.size != 1:
        raise BadEnvOutputError(
            f"returned reward of shape {value.shape} (a {type(raw).__name__}); expected a number"
        )
    return float(value.reshape(()))


def seat_rewards(raw: Any, seats: int) -> np.ndarray:
    """A multi-agent env's rewards, one number per seat; BadEnvOutputError otherwise."""
    if raw is None or isinstance(raw, (str, bytes)):
        raise BadEnvOutputError(
            f"returned rewards of type {type(raw).__name__}; expected one number per seat"
        )
    value = _numeric_array(raw, "rewards", "one number per seat")
    if value.shape not in ((), (seats,)):
        raise BadEnvOutputError(
            f"returned rewards of shape {value.shape} for {seats} seats; "
            "expected one number per seat"
        )
    return value


def seat_flags(raw: Any, seats: int, what: str) -> np.ndarray:
    """A multi-agent env's `terminated` or `truncated` (`what`): one flag per seat, as bools;
    BadEnvOutputError otherwise."""
    value = _numeric_array(raw, what, "one flag per seat")
    if value.shape not in ((), (seats,)):
        raise BadEnvOutputError(
            f"returned {what} of shape {value.shape} for {seats} seats; expected one flag per seat"
        )
    return np.broadcast_to(value.astype(bool), (seats,))


def seat_entries(raw: Any, seats: int, what: str) -> list[Any]:
    """A multi-agent env's observations or infos (`what`): a sequence with one entry per seat,
    as a list; BadEnvOutputError otherwise."""
    # A dict or a string iterates, but over keys or characters, not seats.
    entries = None if isinstance(raw, (dict, str, bytes)) else _as_list(raw)
    if entries is None:
        raise BadEnvOutputError(
            f"returned {what} of type {type(raw).__name__}; expected one per seat"
        )
    if len(entries) != seats:
        raise BadEnvOutputError(
            f"returned {len(entries)} {what} for {seats} seats; expected one per seat"
        )
    return entries


def _as_list(raw: Any) -> list[Any] | None:
    try:
        return list(raw)
    except TypeError:
        return None


def seat_infos(raw: Any, seats: int) -> list[dict]:
    """A multi-agent env's infos: one dict per seat; BadEnvOutputError otherwise."""
    infos = seat_entries(raw, seats, "infos")
    for seat, info in enumerate(infos):
        if not isinstance(info, dict):
            raise BadEnvOutputError(
                f"returned an info of type {type(info).__name__} for seat {seat}; "
                "expected one dict per seat"
            )
    return infos


def _numeric_array(raw: Any, what: str, expected: str) -> np.ndarray:
    try:
        value = np.asarray(raw)
    except Exception:  # noqa: BLE001 - ragged lists and the like: described below
        value = np.asarray(None)
    if value.dtype.kind not in "biuf":
        raise BadEnvOutputError(
            f"returned {what} of type {type(raw).__name__} (dtype {value.dtype}); "
            f"expected {expected}"
        )
    return value
