"""When the runner calls a user's training callback, and what a callback's answer means.

Responsibility: :class:`CallbackSchedule` decides, from the runner's counters, whether a
callback is due: after every learner iteration (a new `TrainingReport`) by default, or every
``every_env_steps`` env steps; and it interprets the answer (``False`` stops training,
anything else, ``None`` included, continues).

Must not: build the statistics (the runner passes a `TrainingStatus`), catch the callback's
exceptions (they propagate to the caller of `train`), or touch processes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from sampleforge.telemetry.status import TrainingStatus

TrainingCallback = Callable[[TrainingStatus], Optional[bool]]
"""``callback(status) -> bool | None``: return ``False`` to stop training."""


class CallbackSchedule:
    """Calls `callback` after each learner iteration, or each `every_env_steps` env steps."""

    @classmethod
    def of(
        cls,
        callback: TrainingCallback | None,
        every_env_steps: int | None,
        env_steps: int,
        training_reports: int,
    ) -> CallbackSchedule | None:
        """The schedule of `callback`, or None without one."""
        if callback is None:
            return None
        return cls(
            callback,
            every_env_steps=every_env_steps,
            env_steps=env_steps,
            training_reports=training_reports,
        )

    def __init__(
        self,
        callback: TrainingCallback,
        *,
        every_env_steps: int | None = None,
        env_steps: int = 0,
        training_reports: int = 0,
    ) -> None:
        """`env_steps` and `training_reports` are the runner's counters when training starts."""
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        if every_env_steps is not None and every_env_steps < 1:
            raise ValueError(
                f"callback_every_env_steps: {every_env_steps} must be >= 1 "
                "(or None: after every learner iteration)"
            )
        self.callback = callback
        self.every_env_steps = every_env_steps
        self._next_env_steps = env_steps + (every_env_steps or 0)
        self._seen_reports = training_reports

    def due(self, env_steps: int, training_reports: int) -> bool:
        """Whether the callback should run now, given the runner's current counters."""
        if self.every_env_steps is None:
            if training_reports == self._seen_reports:
                return False
            self._seen_reports = training_reports
            return True
        if env_steps < self._next_env_steps:
            return False
        # Skip the marks already passed: one call per check, however far the steps jumped.
        missed = (env_steps - self._next_env_steps) // self.every_env_steps
        self._next_env_steps += (missed + 1) * self.every_env_steps
        return True

    def wants_stop(self, status: TrainingStatus) -> bool:
        """Call the callback; True if it returned False (an explicit request to stop)."""
        return self.callback(status) is False
