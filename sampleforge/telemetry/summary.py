"""End-of-run summary written as ``summary.json``: a stable, documented interface.

Responsibility: define :class:`RunSummary` (the exact keys scripts and
benchmarks read) and write it atomically as strict JSON.

What this module must not do: compute the numbers (the runner does) or add,
rename or drop keys without a changelog entry, since external tools parse them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["STOP_REASONS", "RunSummary", "read_summary", "write_summary"]

STOP_REASONS = (
    "train_for_env_steps",
    "stop_at_mean_return",
    "train_for_seconds",
    "interrupted",
    "callback",
)
"""Documented values of ``RunSummary.stopped_because`` (not enforced)."""


@dataclass(frozen=True)
class RunSummary:
    """Outcome of one training run; serialized to JSON with exactly these keys.

    - ``env_steps``: total environment steps (agent frames, after frameskip as
      counted by the runner) collected by the end of the run.
    - ``wall_seconds``: wall-clock seconds the run took, from start to stop.
    - ``mean_fps``: env steps trained in this run divided by the seconds spent
      training (after every process had started): average throughput.
    - ``mean_return_last_100``: mean undiscounted return of the last 100
      finished episodes, or null if no episode finished. A resume continues
      the window of its checkpoint (``checkpoint/episode_windows.py``).
    - ``best_mean_return``: highest value the last-100 mean return reached
      during the run (and the runs it resumed), or null if no episode finished.
    - ``mean_policy_lag``: mean policy lag (learner policy version minus the
      version that collected the sample) over trained samples, or null if
      nothing was trained.
    - ``experiment``: experiment name (the experiment folder's name).
    - ``stopped_because``: why training stopped; one of
      ``"train_for_env_steps"`` (step budget reached), ``"stop_at_mean_return"``
      (target return reached, by the training episodes or an evaluation: ``stop_on``),
      ``"train_for_seconds"`` (time budget reached), ``"interrupted"`` (signal or
      Ctrl-C), ``"callback"`` (a training callback returned False), ``"another_rank"``
      (data-parallel runs: another rank's run ended first).
    - ``best_eval_return``: highest mean return of an evaluation during training
      (``eval_every_env_steps``) in this run, or null if none finished.
    - ``world_size``: the ranks of a data-parallel run (1: one machine's system alone);
      env steps and fps count every rank's.

    Non-finite floats (NaN, inf) are written as null so the file stays strict JSON.
    """

    env_steps: int
    wall_seconds: float
    mean_fps: float
    mean_return_last_100: float | None
    best_mean_return: float | None
    mean_policy_lag: float | None
    experiment: str
    stopped_because: str
    best_eval_return: float | None = None  # a default: summaries written before it still read
    world_size: int = 1


def write_summary(path: Path, summary: RunSummary) -> None:
    """Atomically write ``summary`` as JSON to ``path`` (readers never see a partial file)."""
    path = Path(path)
    fields = {key: _json_safe(value) for key, value in dataclasses.asdict(summary).items()}
    text = json.dumps(fields, indent=2, allow_nan=False) + "\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # no-op after a successful replace


def read_summary(path: Path) -> RunSummary:
    """Read a summary written by :func:`write_summary`; unknown keys are an error."""
    return RunSummary(**json.loads(Path(path).read_text(encoding="utf-8")))


def _json_safe(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
