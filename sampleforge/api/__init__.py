"""The public Python API: one class per algorithm (also importable from `sampleforge`).

Actor-critic: `APPO`, `IMPALA`, `A3C`. Value-based: `DQN`, `Rainbow`, `QRDQN`, `IQN`, `FQF`,
`MDQN`, and `PQN`.

Responsibility: re-export the algorithm classes and the types their methods return.
Must not: hold logic (see ``algorithm.py`` and ``env_argument.py``).
"""

from sampleforge.api.algorithm import (
    A3C,
    APPO,
    DQN,
    FQF,
    IMPALA,
    IQN,
    MDQN,
    PQN,
    QRDQN,
    ActorCriticAlgorithm,
    Algorithm,
    Rainbow,
    ValueBasedAlgorithm,
)
from sampleforge.evaluation.episodes import EvaluationResult
from sampleforge.telemetry import RunSummary, TrainingStatus

__all__ = [
    "A3C",
    "APPO",
    "DQN",
    "FQF",
    "IMPALA",
    "IQN",
    "MDQN",
    "PQN",
    "QRDQN",
    "ActorCriticAlgorithm",
    "Algorithm",
    "EvaluationResult",
    "Rainbow",
    "RunSummary",
    "TrainingStatus",
    "ValueBasedAlgorithm",
]
