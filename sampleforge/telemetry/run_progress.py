"""What the runner knows about a run, built from its components' reports: `Runner.progress`.

Responsibility: fold every statistics report (`SamplerReport`, `EpisodesFinished`,
`TrainingReport`, `InferenceReport`, `LearnerReady`, `CheckpointSaved`, `StagedSteps`) into counters, and turn
them into the scalars written to ``progress.csv``/TensorBoard, the console status line, the
`TrainingStatus` a callback receives and the `RunSummary` of a `train` call.

This is the runner's public progress API: the Python API, the benchmarks and the tests read
these fields instead of the runner's internals.

Must not: decide anything (when to stop, checkpoint or report is the runner's), or touch
processes and queues.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from sampleforge.comms.messages import (
    CheckpointSaved,
    EpisodesFinished,
    InferenceReport,
    LearnerReady,
    SamplerReport,
    StagedSteps,
    TrainingReport,
)
from sampleforge.envs.stepping.faults import RateLimitedWarnings
from sampleforge.telemetry.bottleneck import bottleneck
from sampleforge.telemetry.console import format_status_line
from sampleforge.telemetry.episode_stats import PopulationEpisodeWindows
from sampleforge.telemetry.fps import FpsMeter
from sampleforge.telemetry.learning_curves import FULL_WINDOW, WINDOW_EPISODES
from sampleforge.telemetry.status import TrainingStatus
from sampleforge.telemetry.summary import RunSummary

log = logging.getLogger(__name__)

_STATISTICS = (
    SamplerReport,
    EpisodesFinished,
    TrainingReport,
    InferenceReport,
    LearnerReady,
    CheckpointSaved,
    StagedSteps,
)
_LOSSES = ("losses/policy", "losses/value", "losses/entropy")


@dataclass
class RunProgress:
    """Counters of one run (every `train` call of one runner), from the components' reports.

    - ``env_steps`` / ``policy_version``: per trained policy, the env steps its learner has
      trained on and its SGD steps (restored from a checkpoint on resume).
    - ``frames_collected``: env frames the rollout workers have simulated.
    - ``episodes``: returns and lengths of each trained policy's last 100 episodes, every policy
      weighing the same in their means (`PopulationEpisodeWindows`).
    - ``lag``: (min, mean, max) policy lag of the last learner iteration.
    - ``timings``: ``perf/<component>_<part>_sec`` seconds, summed over the run.
    - ``env_faults``: env crashes the rollout workers recovered from.
    - ``inference_batches`` / ``inference_samples``: forward passes served, and their samples.
    """

    num_trained_policies: int = 1
    env_steps: dict[int, int] = field(default_factory=dict)
    policy_version: dict[int, int] = field(default_factory=dict)
    frames_collected: int = 0
    episodes: PopulationEpisodeWindows = field(init=False)
    fps: FpsMeter = field(default_factory=FpsMeter)
    last_stats: dict[str, float] = field(default_factory=dict)
    lag: tuple[float, float, float] | None = None
    lag_sum: float = 0.0
    lag_reports: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    env_faults: int = 0
    inference_batches: int = 0
    inference_samples: int = 0
    # Per rollout worker: an env failing at every step must not flood the log.
    _fault_warnings: dict[int, RateLimitedWarnings] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.episodes = PopulationEpisodeWindows(self.num_trained_policies, FULL_WINDOW)

    @property
    def total_env_steps(self) -> int:
        return sum(self.env_steps.values())

    @property
    def mean_policy_lag(self) -> float | None:
        """Mean over every learner iteration of the run so far."""
        return self.lag_sum / self.lag_reports if self.lag_reports else None

    def counters(self) -> dict[str, Any]:
        """What an exact resume restores (`restore_counters`)."""
        return {
            "env_steps": dict(self.env_steps),
            "policy_version": dict(self.policy_version),
            "frames_collected": self.frames_collected,
            "episodes": self.episodes,
        }

    def restore_counters(self, counters: dict[str, Any]) -> None:
        self.env_steps, self.policy_version = counters["env_steps"], counters["policy_version"]
        self.frames_collected, self.episodes = counters["frames_collected"], counters["episodes"]

    def restart_fps(self) -> None:
        """Frames per second count from now (a new `train` call)."""
        self.fps = FpsMeter()

    # --- reports ------------------------------------------------------------------------------
    def record(self, msg: Any) -> bool:
        """Fold a statistics report in; False if `msg` is not one."""
        if not isinstance(msg, _STATISTICS):
            return False
        if isinstance(msg, SamplerReport):
            self._on_sampler(msg)
        elif isinstance(msg, EpisodesFinished):
            if msg.policy_id < self.num_trained_policies:  # frozen opponents' don't count
                self.episodes.add(msg.policy_id, msg.returns, msg.lengths)
        elif isinstance(msg, TrainingReport):
            self._on_training(msg)
        elif isinstance(msg, InferenceReport):
            self._add_timings("inference", msg.timings)
            self.inference_batches += msg.batches
            self.inference_samples += msg.samples
        elif isinstance(msg, LearnerReady):
            self.env_steps[msg.policy_id] = msg.env_steps
            self.policy_version[msg.policy_id] = msg.policy_version
            if msg.resumed_from:
                log.info(
                    "policy %d resumed from %s (env steps %d, policy version %d)",
                    msg.policy_id,
                    msg.resumed_from,
                    msg.env_steps,
                    msg.policy_version,
                )
            if msg.note:
                log.info("policy %d: %s", msg.policy_id, msg.note)
        else:  # CheckpointSaved, StagedSteps: env steps a resumed run continues from, or counted
            # before training starts
            steps = self.env_steps.get(msg.policy_id, 0)
            self.env_steps[msg.policy_id] = max(steps, msg.env_steps)
        return True

    def _on_sampler(self, msg: SamplerReport) -> None:
        self.frames_collected += msg.env_frames
        warnings = self._fault_warnings.setdefault(msg.worker, RateLimitedWarnings(log))
        for fault in msg.env_faults:
            warnings.warning(f"{fault} (restarted)")
        self.env_faults += len(msg.env_faults)
        self.fps.record(self.frames_collected)
        self._add_timings("rollout", msg.timings)

    def _on_training(self, msg: TrainingReport) -> None:
        self.env_steps[msg.policy_id] = msg.env_steps
        self.policy_version[msg.policy_id] = msg.policy_version
        self.last_stats = msg.stats
        self.lag = (msg.lag_min, msg.lag_mean, msg.lag_max)
        self.lag_sum += msg.lag_mean
        self.lag_reports += 1

    def _add_timings(self, component: str, timings: dict[str, float]) -> None:
        for part, seconds in timings.items():
            key = f"perf/{component}_{part}_sec"
            self.timings[key] = self.timings.get(key, 0.0) + seconds

    # --- views --------------------------------------------------------------------------------
    def scalars(self) -> dict[str, float]:
        """The run's metrics as written to ``progress.csv`` and TensorBoard."""
        scalars = {
            "perf/fps_10s": self.fps.fps(10),
            "perf/fps_60s": self.fps.fps(60),
            "perf/frames_collected": float(self.frames_collected),
            "health/env_faults": float(self.env_faults),
        }
        mean_return, mean_length = self.episodes.mean_return, self.episodes.mean_length
        if mean_return is not None and mean_length is not None:  # i.e. episodes.count > 0
            scalars["episode/return_mean"] = mean_return
            scalars["episode/length_mean"] = mean_length
            scalars[WINDOW_EPISODES] = float(self.episodes.count)
        if self.lag is not None:
            scalars.update(
                {
                    "policy_lag/min": self.lag[0],
                    "policy_lag/mean": self.lag[1],
                    "policy_lag/max": self.lag[2],
                }
            )
        scalars.update(self.last_stats)
        scalars.update(self.timings)
        return scalars

    def status_line(self, scalars: dict[str, float], target_env_steps: int | None) -> str:
        """One console line: progress, speed, returns, lag, losses and the bottleneck."""
        losses = {k.split("/", 1)[1]: v for k, v in self.last_stats.items() if k in _LOSSES}
        line = format_status_line(
            env_steps=self.total_env_steps,
            target_env_steps=target_env_steps,
            fps={"10s": scalars["perf/fps_10s"], "60s": scalars["perf/fps_60s"]},
            mean_return=self.episodes.mean_return,
            mean_length=self.episodes.mean_length,
            policy_lag=self.lag,
            losses=losses,
            learning_rate=self.last_stats.get("learner/lr"),
        )
        return f"{line} | {bottleneck(scalars)}"

    def status(self, env_steps_at_call: int, call_started: float) -> TrainingStatus:
        """What a training callback receives, for the `train` call begun at `call_started`
        (`time.monotonic()`) with `env_steps_at_call` env steps."""
        return TrainingStatus(
            env_steps=self.total_env_steps,
            env_steps_this_call=self.total_env_steps - env_steps_at_call,
            seconds_this_call=time.monotonic() - call_started,
            policy_versions=dict(self.policy_version),
            mean_return=self.episodes.mean_return,
            mean_length=self.episodes.mean_length,
            episodes=self.episodes.total_episodes,
            fps=self.fps.fps(10),
            policy_lag=None if self.lag is None else self.lag[1],
            learner_stats=dict(self.last_stats),
        )

    def summary(
        self,
        reason: str,
        experiment: str,
        call_started: float,
        training_started: float,
        env_steps_at_call: int,
        best_eval_return: float | None = None,
    ) -> RunSummary:
        """The summary of a `train` call: `wall_seconds` from `call_started` (starting the
        processes included), `mean_fps` over the time since `training_started`."""
        now = time.monotonic()
        trained = self.total_env_steps - env_steps_at_call
        return RunSummary(
            env_steps=self.total_env_steps,
            wall_seconds=now - call_started,
            mean_fps=trained / max(now - training_started, 1e-9),
            mean_return_last_100=self.episodes.mean_return,
            best_mean_return=self.episodes.best_mean_return,
            mean_policy_lag=self.mean_policy_lag,
            experiment=experiment,
            stopped_because=reason,
            best_eval_return=best_eval_return,
        )
