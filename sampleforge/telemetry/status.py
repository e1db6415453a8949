"""A snapshot of a training run in progress, handed to user callbacks.

Responsibility: define :class:`TrainingStatus`, the read-only view of the runner's current
statistics that a callback receives after every learner iteration (or every N env steps).

What this module must not do: compute the numbers (the runner does) or decide when callbacks
run (``sampleforge.telemetry.training_callback`` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["TrainingStatus"]


@dataclass(frozen=True)
class TrainingStatus:
    """Where training stands right now.

    - ``env_steps``: total env steps trained so far (all `train` calls, resumes included).
    - ``env_steps_this_call``: env steps trained since the current `train` call began.
    - ``seconds_this_call``: wall-clock seconds since the current `train` call began.
    - ``policy_versions``: ``{policy_id: SGD steps}`` of each learner.
    - ``mean_return`` / ``mean_length``: over the last 100 finished episodes (None before
      the first one).
    - ``episodes``: episodes finished since the runner started.
    - ``fps``: env steps per second over the last 10 s.
    - ``policy_lag``: mean policy lag of the learner's last iteration (None before it).
    - ``learner_stats``: the last iteration's learner statistics (``losses/policy``,
      ``learner/lr``, ...), as written to ``progress.csv``.
    """

    env_steps: int
    env_steps_this_call: int
    seconds_this_call: float
    policy_versions: Mapping[int, int]
    mean_return: float | None
    mean_length: float | None
    episodes: int
    fps: float
    policy_lag: float | None
    learner_stats: Mapping[str, float] = field(default_factory=dict)
