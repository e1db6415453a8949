"""The public Python API: one class per algorithm (also importable from `sampleforge`).

Actor-critic: `APPO`, `IMPALA`, `A3C`. Value-based: `DQN`, `Rainbow`, `QRDQN`, `IQN`, `FQF`,
`MDQN`, and `PQN`. Continuous control: `DDPG`, `TD3`, `SAC`, `CrossQ`.

Responsibility: re-export the algorithm classes and the types their methods return.
Must not: hold logic (see ``algorithm.py`` and ``env_argument.py``).
"""

from sampleforge.api.algorithm import (
    A3C,
    APPO,
    DDPG,
    DQN,
    FQF,
    IMPALA,
    IQN,
    MDQN,
    PQN,
    QRDQN,
    SAC,
    TD3,
    ActorCriticAlgorithm,
    Algorithm,
    ContinuousControlAlgorithm,
    CrossQ,
    Rainbow,
    ValueBasedAlgorithm,
)
from sampleforge.evaluation.episodes import EvaluationResult
from sampleforge.telemetry import RunSummary, TrainingStatus

__all__ = [
    "A3C",
    "APPO",
    "DDPG",
    "DQN",
    "FQF",
    "IMPALA",
    "IQN",
    "MDQN",
    "PQN",
    "QRDQN",
    "SAC",
    "TD3",
    "ActorCriticAlgorithm",
    "Algorithm",
    "ContinuousControlAlgorithm",
    "CrossQ",
    "EvaluationResult",
    "Rainbow",
    "RunSummary",
    "TrainingStatus",
    "ValueBasedAlgorithm",
]
