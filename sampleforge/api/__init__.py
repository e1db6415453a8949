"""The public Python API: `APPO`, `IMPALA` and `A3C` (also importable from `sampleforge`).

Responsibility: re-export the algorithm classes and the types their methods return.
Must not: hold logic (see ``algorithm.py`` and ``env_argument.py``).
"""

from sampleforge.api.algorithm import A3C, APPO, IMPALA, ActorCriticAlgorithm
from sampleforge.evaluation.episodes import EvaluationResult
from sampleforge.telemetry import RunSummary, TrainingStatus

__all__ = [
    "A3C",
    "APPO",
    "IMPALA",
    "ActorCriticAlgorithm",
    "EvaluationResult",
    "RunSummary",
    "TrainingStatus",
]
