"""The runner's side of evaluation during training (``--eval_every_env_steps``).

Responsibility: ask the run's evaluation workers (one per policy, added by the wiring) for an
evaluation every `eval_every_env_steps` env steps (never more than one in flight per policy:
if evaluating is slower than training, marks are skipped), and turn each `EvaluationFinished`
into ``eval/`` metrics (``progress.csv``, TensorBoard) and a log line.

Must not: evaluate anything itself, or block the runner's loop.
"""

from __future__ import annotations

import logging
import statistics
from pathlib import Path

from sampleforge.checkpoint.experiment_dir import ExperimentDir
from sampleforge.comms.eval_messages import EvaluationFinished, EvaluationRequested
from sampleforge.comms.queues import send_many
from sampleforge.config import Config
from sampleforge.telemetry import MetricsWriter

log = logging.getLogger(__name__)


def evaluation_dir(exp: ExperimentDir, policy_id: int) -> Path:
    """Where the evaluation worker of `policy_id` keeps the best evaluated weights."""
    return exp.path / "eval" / f"p{policy_id}"


class TrainingEvaluation:
    """Schedules evaluations and records their results; see the module docstring."""

    def __init__(
        self, *, every_env_steps: int, inboxes: dict[int, object], env_steps: int = 0
    ) -> None:
        self.every_env_steps = every_env_steps
        self.inboxes = inboxes
        self._next_env_steps = env_steps + every_env_steps
        self._in_flight: set[int] = set()
        self.last: dict[int, EvaluationFinished] = {}
        self.best_mean_return: float | None = None  # over every policy's evaluations

    @classmethod
    def for_run(
        cls, cfg: Config, inboxes: dict[int, object], env_steps: int = 0
    ) -> TrainingEvaluation | None:
        """The schedule of a run whose evaluation workers read `inboxes` (built by the
        wiring); None when evaluation is off."""
        if cfg.eval_every_env_steps is None:
            return None
        return cls(every_env_steps=cfg.eval_every_env_steps, inboxes=inboxes, env_steps=env_steps)

    def maybe_request(self, env_steps: int) -> None:
        """Ask every idle evaluation worker for an evaluation if a mark was passed."""
        if env_steps < self._next_env_steps or self._in_flight:
            return
        for policy_id, inbox in self.inboxes.items():
            send_many(inbox, [EvaluationRequested(policy_id, env_steps)])
            self._in_flight.add(policy_id)
        self._next_env_steps = env_steps + self.every_env_steps

    def latest_mean_return(self) -> float | None:
        """The best of each policy's latest evaluation mean return (None before the first)."""
        means = [statistics.fmean(msg.returns) for msg in self.last.values()]
        return max(means) if means else None

    def on_finished(self, msg: EvaluationFinished, writer: MetricsWriter) -> None:
        """Record one evaluation's results as ``eval/`` metrics at its env-step count."""
        self._in_flight.discard(msg.policy_id)
        self.last[msg.policy_id] = msg
        returns = msg.returns
        mean = statistics.fmean(returns)
        if self.best_mean_return is None or mean > self.best_mean_return:
            self.best_mean_return = mean
        prefix = "eval/" if len(self.inboxes) == 1 else f"eval_p{msg.policy_id}/"
        writer.write(
            msg.env_steps,
            {
                f"{prefix}return_mean": mean,
                f"{prefix}return_std": statistics.pstdev(returns),
                f"{prefix}return_min": min(returns),
                f"{prefix}return_max": max(returns),
                f"{prefix}length_mean": statistics.fmean(msg.lengths),
                f"{prefix}policy_version": float(msg.policy_version),
                f"{prefix}seconds": msg.seconds,
            },
        )
        log.info(
            "evaluation of policy %d at %s env steps (version %d): mean return %.2f over "
            "%d episodes%s",
            msg.policy_id,
            f"{msg.env_steps:,}",
            msg.policy_version,
            mean,
            len(returns),
            f"; new best saved to {msg.best_path}" if msg.best_path else "",
        )
