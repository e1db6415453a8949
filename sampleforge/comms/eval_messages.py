"""Messages between the runner and the evaluation process (evaluation during training).

Kept apart from ``messages.py`` (the training hot path's vocabulary): these are rare control
and report messages, frozen dataclasses like the other commands and reports. Commands are
imperative-sounding events the runner requests; reports are past tense.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvaluationRequested:
    """Runner -> evaluation process: evaluate a frozen copy of the policy's current weights.

    `env_steps` is the run's env-step count when asked; the result is logged at that step.
    """

    policy_id: int
    env_steps: int


@dataclass(frozen=True)
class EvaluationFinished:
    """Evaluation process -> runner: returns and lengths of one evaluation's episodes.

    `policy_version` is the version of the weights evaluated; `best_path` is set when these
    weights scored the best mean return so far and were saved there.
    """

    policy_id: int
    env_steps: int
    policy_version: int
    returns: list[float]
    lengths: list[int]
    seconds: float
    best_path: str | None = None
