"""Runner: starts every component, watches them, logs, checkpoints, and decides when to stop.

    runner = Runner(cfg)          # validates, prepares the experiment folder (no processes yet)
    runner.start()                # buffers, queues, processes; waits until all have started
    summary = runner.train()      # until train_for_env_steps / train_for_seconds / solved
    summary = runner.train(until_env_steps=2_000_000)   # again, same processes
    runner.close()                # stop message -> SIGTERM -> SIGKILL, nothing left behind

Between `train` calls the rollout workers are paused, not respawned. Ctrl-C or SIGTERM during
`train` ends it cleanly with a final checkpoint (`stopped_because == "interrupted"`); a second
Ctrl-C kills every child at once.

Must not: compute anything about learning; it only reads reports and sends commands.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

import torch

from sampleforge.comms.eval_messages import EvaluationFinished
from sampleforge.comms.hosts import InlineHost, ProcessHost, spawn_problem
from sampleforge.comms.messages import (
    CheckpointSaved,
    ComponentFailed,
    ComponentStarted,
    ComponentStopped,
    EpisodesFinished,
    InferenceReport,
    LearnerReady,
    LoadWeights,
    Pause,
    Resume,
    SamplerReport,
    SaveCheckpoint,
    Stop,
    TrainingReport,
)
from sampleforge.comms.queue_locks import release_if_held_by
from sampleforge.comms.queues import receive, send_many
from sampleforge.components.evaluation_hook import TrainingEvaluation
from sampleforge.components.experiment import prepare_experiment
from sampleforge.components.model_factory import check_model_fits_env, make_actor_critic
from sampleforge.components.population import Population
from sampleforge.components.serial_snapshot import (
    SNAPSHOT_FILENAME,
    restore_snapshot,
    save_snapshot,
    take_snapshot,
)
from sampleforge.components.supervisor import ComponentDied, Supervisor
from sampleforge.components.training_callback import CallbackSchedule, TrainingCallback
from sampleforge.components.wiring import wire
from sampleforge.config import Config, ConfigError, validate_config
from sampleforge.envs.registry import env_info, resolve_env
from sampleforge.telemetry import (
    EpisodeStatsWindow,
    FpsMeter,
    MetricsWriter,
    ProgressBar,
    RunSummary,
    format_status_line,
    write_summary,
)
from sampleforge.telemetry.bottleneck import bottleneck
from sampleforge.telemetry.status import TrainingStatus

log = logging.getLogger(__name__)

START_TIMEOUT_SEC = 120.0
# A rollout worker builds its envs one after another before it reports started: an ALE env
# takes about 0.1 s to make and reset, so 1,024 envs in one worker take close to two minutes.
START_ALLOWANCE_PER_ENV_SEC = 0.5
STOP_TIMEOUT_SEC = 8.0
CHECKPOINT_TIMEOUT_SEC = 60.0


class TrainingError(RuntimeError):
    """A component failed; the message names it and carries its error."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise TrainingError("--device cuda was asked for, but torch sees no CUDA device "
                            "(use --device cpu or auto)")
    return torch.device(name)


@dataclass
class _Progress:
    """What the runner knows about the run, built from reports."""

    env_steps: dict[int, int] = field(default_factory=dict)
    frames_collected: int = 0
    policy_version: dict[int, int] = field(default_factory=dict)
    last_stats: dict[str, float] = field(default_factory=dict)
    lag: Optional[tuple[float, float, float]] = None
    lag_sum: float = 0.0
    lag_reports: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def total_env_steps(self) -> int:
        return sum(self.env_steps.values())


class Runner:
    """Owns a training run from start to close; see the module docstring."""

    def __init__(self, cfg: Config):
        validate_config(cfg)
        self.cfg = cfg
        self.env_spec = resolve_env(cfg.env)
        self.env = env_info(cfg.env)
        check_model_fits_env(cfg, self.env)
        self.device = resolve_device(cfg.device)
        problem = None if cfg.serial_mode else spawn_problem()
        if problem:  # before anything is written or started
            raise ConfigError([problem])
        self.exp, self.resume = prepare_experiment(cfg)
        threshold = cfg.stop_at_mean_return
        self.stop_at_mean_return = self.env.reward_threshold if threshold is None else threshold
        self.episodes = EpisodeStatsWindow(100)
        self.progress = _Progress()
        self.fps = FpsMeter()
        self.host: ProcessHost | InlineHost | None = None
        self.supervisor: Supervisor | None = None
        self._training = False
        self.env_faults = 0
        self.inference_stats = [0, 0]  # batches served, samples in them
        self.wiring = None
        self.writer: MetricsWriter | None = None
        self._stop_signal: Optional[int] = None
        self._final_checkpoints: set[int] = set()  # policies whose final checkpoint is written
        self._closed = False
        self.interrupted_by: Optional[int] = None
        self.evaluation: TrainingEvaluation | None = None  # with eval_every_env_steps
        self.population: Population | None = None
        self._callback: CallbackSchedule | None = None  # set during `train`
        self._train_call = (0, time.monotonic())  # (env steps, time) when `train` began

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Allocate shared memory and queues, start every component, wait until all run.

        SIGINT/SIGTERM during `start` and `train` end them cleanly (see `_install_signal_
        handlers`); between calls the caller's own handlers are in place."""
        restore_signals = self._install_signal_handlers()
        try:
            with self._component_threads():
                self._start()
        finally:
            restore_signals()

    def _start(self) -> None:
        self.wiring = wire(self.cfg, self.env_spec, self.env, self.device, self.exp, self.resume)
        self.evaluation = TrainingEvaluation.attach(self.cfg, self.env_spec, self.env, self.exp,
                                                    self.wiring)
        self.population = Population(self.cfg, self.wiring, self.exp.path,
                                     self.env.reward_shaping, self.resume)
        self.host = (InlineHost(self.wiring.report_queue) if self.cfg.serial_mode else
                     ProcessHost(self.wiring.report_queue, on_exit=self._release_queue_locks))
        self.supervisor = Supervisor(cfg=self.cfg, host=self.host, wiring=self.wiring,
                                     is_training=lambda: self._training)
        self.writer = MetricsWriter(self.exp.path, tensorboard=self.cfg.tensorboard)
        try:
            for spec in self.wiring.specs:  # learner first: it publishes the initial weights
                self.host.start(spec)
            self._wait_started()
            self._restore_serial_snapshot()
            self.population.send_current_hyperparameters()
        except BaseException:
            self.close()
            raise

    def _wait_started(self) -> None:
        pending = {spec.name for spec in self.wiring.specs}
        timeout = START_TIMEOUT_SEC + START_ALLOWANCE_PER_ENV_SEC * self.cfg.num_envs_per_worker
        deadline = time.monotonic() + timeout
        while pending and self._stop_signal is None:
            if time.monotonic() > deadline:
                raise TrainingError(f"components did not start within {timeout:.0f} s: "
                                    f"{', '.join(sorted(pending))}")
            self.host.poll(0.0)
            for msg in receive(self.wiring.report_queue, 0.05):
                if isinstance(msg, ComponentStarted):
                    pending.discard(msg.component)
                else:
                    self._on_report(msg)
            self._check_processes()

    def train(self, until_env_steps: Optional[int] = None,
              seconds: Optional[float] = None, callback: Optional[TrainingCallback] = None,
              callback_every_env_steps: Optional[int] = None) -> RunSummary:
        """Train until `until_env_steps` total env steps (default: cfg.train_for_env_steps),
        `seconds` (default: cfg.train_for_seconds) or the return target; then pause.

        `callback(status)` runs in this loop after every learner iteration, or every
        `callback_every_env_steps` env steps; returning False stops training
        (`stopped_because == "callback"`). Its exceptions propagate."""
        started = time.monotonic()
        if self.host is None:
            self.start()
        if self._stop_signal is not None:
            # Interrupted while starting: nothing was trained, the previous checkpoint stands.
            self._stop_signal = None
            return self._summary("interrupted", started, started, self.progress.total_env_steps)
        restore_signals = self._install_signal_handlers()
        try:
            with self._component_threads():
                return self._train(started, until_env_steps, seconds, callback,
                                   callback_every_env_steps)
        finally:
            restore_signals()
            self._stop_signal = None

    def _train(self, started: float, until_env_steps: Optional[int], seconds: Optional[float],
               callback: Optional[TrainingCallback],
               callback_every_env_steps: Optional[int]) -> RunSummary:
        target = until_env_steps or self.cfg.train_for_env_steps
        seconds = self.cfg.train_for_seconds if seconds is None else seconds
        steps_at_start = self.progress.total_env_steps
        self._train_call = (steps_at_start, started)
        self._callback = None if callback is None else CallbackSchedule(
            callback, every_env_steps=callback_every_env_steps, env_steps=steps_at_start,
            training_reports=self.progress.lag_reports)
        training_started = time.monotonic()
        self.fps = FpsMeter()
        bar = ProgressBar(target, initial=steps_at_start)
        self._training = True
        self._broadcast_to_samplers_and_learners(Resume())
        try:
            reason = self._loop(target, seconds, started, bar)
            if self.cfg.serial_mode and self.cfg.serial_snapshot:  # before anything reacts
                self._save_serial_snapshot()
        finally:
            bar.close()
            self._training = False
        self._broadcast_to_samplers_and_learners(Pause())
        self._save_checkpoint(final=True)
        self._drain_reports(0.2)  # statistics the workers flushed when they paused
        summary = self._summary(reason, started, training_started, steps_at_start)
        write_summary(self.exp.summary_path, summary)
        return summary

    def close(self) -> None:
        """Stop every component and release all resources. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.wiring is not None and self.host is not None:
                self._stop_components()
        finally:
            if self.writer is not None:
                self.writer.close()
            self.wiring = None

    def _release_queue_locks(self, name: str, pid: int) -> None:
        """A process that ended holding a queue's lock would block everyone else on it."""
        wiring = self.wiring
        for queue_name, q in (wiring.queues().items() if wiring is not None else ()):
            if release_if_held_by(q, pid):
                log.warning("%s (pid %d) died holding the lock of queue %s; released it",
                            name, pid, queue_name)

    def _stop_components(self) -> None:
        dead = self.host.dead()
        specs = self.supervisor.current_specs() if self.supervisor else self.wiring.specs
        for spec in specs:
            if spec.name in dead:
                continue  # never signal the queue of a killed process (it may block forever)
            try:
                send_many(spec.control_queue, [Stop()], timeout=1.0)
            except Exception:  # noqa: BLE001 - a full queue must not stop the shutdown
                pass
        forced = self.host.join_all(STOP_TIMEOUT_SEC)
        if forced:
            log.warning("had to terminate components that did not stop: %s", ", ".join(forced))

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def _component_threads(self):
        """In serial mode the components run here, with one torch thread as in their own
        processes: their small batches gain nothing from more, and on a busy machine torch's
        thread pool synchronising at every op made small forward passes up to 60x slower
        (measured on a loaded 2-core machine)."""
        if not self.cfg.serial_mode:
            yield
            return
        previous = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(previous)

    # --- the loop -------------------------------------------------------------------------------
    def _loop(self, target: int, seconds: Optional[float], started: float, bar) -> str:
        last_status = last_save = time.monotonic()
        while True:
            self.host.poll(0.0 if self.cfg.serial_mode else 0.05)
            for msg in receive(self.wiring.report_queue, 0.0):
                self._on_report(msg)
            self._check_processes()
            if self.evaluation is not None:
                self.evaluation.maybe_request(self.progress.total_env_steps)
            self.population.step(self.progress.total_env_steps)
            now = time.monotonic()
            reason = self._stop_reason(target, seconds, now - started) or self._callback_stop()
            if reason:
                self._report_status(bar, target)
                return reason
            if now - last_status >= self.cfg.report_every_sec:
                self._report_status(bar, target)
                last_status = now
            if now - last_save >= self.cfg.save_every_sec:
                self._request_checkpoint(final=False)
                last_save = now

    def _stop_reason(self, target: int, seconds: Optional[float], elapsed: float) -> str:
        if self._stop_signal is not None:
            return "interrupted"
        if self.progress.total_env_steps >= target:
            return "train_for_env_steps"
        if seconds is not None and elapsed >= seconds:
            return "train_for_seconds"
        mean = self.episodes.mean_return
        solved = self.stop_at_mean_return is not None and math.isfinite(self.stop_at_mean_return)
        if solved and self.episodes.count >= 100 and mean >= self.stop_at_mean_return:
            return "stop_at_mean_return"
        return ""

    def _callback_stop(self) -> str:
        """"callback" if the training callback is due and asks to stop, else ""."""
        p = self.progress
        if self._callback is None or not self._callback.due(p.total_env_steps, p.lag_reports):
            return ""
        return "callback" if self._callback.wants_stop(self.status()) else ""

    def status(self) -> TrainingStatus:
        """The run's current statistics (what a training callback receives)."""
        p = self.progress
        steps_at_start, started = self._train_call
        return TrainingStatus(
            env_steps=p.total_env_steps, env_steps_this_call=p.total_env_steps - steps_at_start,
            seconds_this_call=time.monotonic() - started,
            policy_versions=dict(p.policy_version), mean_return=self.episodes.mean_return,
            mean_length=self.episodes.mean_length, episodes=self.episodes.total_episodes,
            fps=self.fps.fps(10), policy_lag=None if p.lag is None else p.lag[1],
            learner_stats=dict(p.last_stats))

    def _on_report(self, msg) -> None:
        p = self.progress
        if isinstance(msg, SamplerReport):
            p.frames_collected += msg.env_frames
            for fault in msg.env_faults:
                log.warning("%s (restarted)", fault)
            self.env_faults += len(msg.env_faults)
            self.fps.record(p.frames_collected)
            self._add_timings("rollout", msg.timings)
        elif isinstance(msg, EpisodesFinished):
            if msg.policy_id < self.cfg.num_policies:  # frozen opponents' returns don't count
                self.episodes.add(msg.returns, msg.lengths)
            self.population.on_episodes(msg)
        elif isinstance(msg, TrainingReport):
            p.env_steps[msg.policy_id] = msg.env_steps
            p.policy_version[msg.policy_id] = msg.policy_version
            p.last_stats = msg.stats
            p.lag = (msg.lag_min, msg.lag_mean, msg.lag_max)
            p.lag_sum += msg.lag_mean
            p.lag_reports += 1
            self.population.on_training(msg)
        elif isinstance(msg, InferenceReport):
            self._add_timings("inference", msg.timings)
            self.inference_stats[0] += msg.batches
            self.inference_stats[1] += msg.samples
        elif isinstance(msg, LearnerReady):
            p.env_steps[msg.policy_id] = msg.env_steps
            p.policy_version[msg.policy_id] = msg.policy_version
            if msg.resumed_from:
                log.info("policy %d resumed from %s (env steps %d, policy version %d)",
                         msg.policy_id, msg.resumed_from, msg.env_steps, msg.policy_version)
        elif isinstance(msg, CheckpointSaved):
            if msg.final:
                self._final_checkpoints.add(msg.policy_id)
                log.info("final checkpoint of policy %d: %s", msg.policy_id, msg.path)
            # The learner may have trained a little after the last report: the checkpoint's
            # counters are the ones a resumed run continues from.
            p.env_steps[msg.policy_id] = max(p.env_steps.get(msg.policy_id, 0), msg.env_steps)
        elif isinstance(msg, EvaluationFinished) and self.evaluation is not None:
            self.evaluation.on_finished(msg, self.writer)
        elif isinstance(msg, ComponentFailed):
            raise TrainingError(f"{msg.component} failed: {msg.error}\n{msg.traceback}")
        elif not isinstance(msg, (ComponentStarted, ComponentStopped)):
            raise TypeError(f"runner: unexpected report {msg!r}")

    def _add_timings(self, prefix: str, timings: dict[str, float]) -> None:
        for k, v in timings.items():
            key = f"perf/{prefix}_{k}_sec"
            self.progress.timings[key] = self.progress.timings.get(key, 0.0) + v

    def _check_processes(self) -> None:
        if self._closed or self.supervisor is None:
            return
        if self.host.dead():
            # A failure report may be in flight: a component that raised fails the run with
            # its own error rather than being replaced.
            for msg in receive(self.wiring.report_queue, 0.2):
                self._on_report(msg)
        try:
            self.supervisor.check()
        except ComponentDied as e:
            raise TrainingError(str(e)) from None

    def _drain_reports(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.host.poll(0.0)
            for msg in receive(self.wiring.report_queue, 0.0 if self.cfg.serial_mode else 0.02):
                self._on_report(msg)

    # --- checkpoints ----------------------------------------------------------------------------
    def load_weights(self, state_dicts: dict[int, dict]) -> None:
        """Between `train` calls (Python API): each learner loads its policy's new weights
        (`{policy_id: state_dict}`), republishes them and checkpoints them; returns once the
        checkpoints are written (queued behind `LoadWeights`, they acknowledge it)."""
        if self.host is None:
            self.start()
        model = make_actor_critic(self.cfg, self.env.observation_space, self.env.action_space)
        for policy_id, state_dict in state_dicts.items():
            model.load_state_dict(state_dict)
            # Bulk weights through shared memory; the learner's inbox carries the version only.
            incoming = self.wiring.incoming_weights[policy_id]
            version = incoming.version + 1
            incoming.publish(model, version)
            send_many(self.wiring.learner_inboxes[policy_id], [LoadWeights(version)])
        self._save_checkpoint(final=True, score=False)

    def _request_checkpoint(self, final: bool, score: bool = True) -> None:
        self.population.save()
        for p, inbox in self.wiring.learner_inboxes.items():
            # None: not a candidate for the best checkpoint.
            mean_return = self.population.returns[p].mean_return if score else None
            send_many(inbox, [SaveCheckpoint(final=final, mean_return=mean_return)])

    def _save_checkpoint(self, final: bool, score: bool = True) -> None:
        """Ask every learner for a checkpoint and wait until they are written."""
        self._final_checkpoints = set()
        self._request_checkpoint(final, score)
        deadline = time.monotonic() + CHECKPOINT_TIMEOUT_SEC
        while len(self._final_checkpoints) < self.cfg.num_policies:
            if time.monotonic() > deadline:
                raise TrainingError(f"no checkpoint written within {CHECKPOINT_TIMEOUT_SEC:.0f} s")
            self.host.poll(0.0)
            for msg in receive(self.wiring.report_queue, 0.0 if self.cfg.serial_mode else 0.05):
                self._on_report(msg)
            self._check_processes()

    # --- exact resume in serial mode (components/serial_snapshot.py) -----------------------------
    def _save_serial_snapshot(self) -> None:
        p = self.progress
        runner_state = {"env_steps": dict(p.env_steps), "policy_version": dict(p.policy_version),
                        "frames_collected": p.frames_collected, "episodes": self.episodes}
        save_snapshot(self.exp.path / SNAPSHOT_FILENAME, self.cfg, runner_state, self.wiring,
                      self.host.components)

    def _restore_serial_snapshot(self) -> None:
        state = take_snapshot(self.exp.path / SNAPSHOT_FILENAME, self.cfg) if self.resume else None
        if state is None:
            return
        runner_state = restore_snapshot(state, self.wiring, self.host.components)
        p = self.progress
        p.env_steps, p.policy_version = runner_state["env_steps"], runner_state["policy_version"]
        p.frames_collected = runner_state["frames_collected"]
        self.episodes = runner_state["episodes"]
        log.info("exact resume: every component continues from where the last run stopped")

    # --- reporting ------------------------------------------------------------------------------
    def _report_status(self, bar, target: int) -> None:
        p = self.progress
        scalars = {"perf/fps_10s": self.fps.fps(10), "perf/fps_60s": self.fps.fps(60),
                   "perf/frames_collected": float(p.frames_collected)}
        if self.episodes.count:
            scalars["episode/return_mean"] = self.episodes.mean_return
            scalars["episode/length_mean"] = self.episodes.mean_length
        if p.lag is not None:
            scalars.update({"policy_lag/min": p.lag[0], "policy_lag/mean": p.lag[1],
                            "policy_lag/max": p.lag[2]})
        scalars.update(p.last_stats)
        scalars.update(p.timings)
        scalars.update(self.supervisor.health_metrics())
        scalars["health/env_faults"] = float(self.env_faults)
        scalars.update(self.population.scalars())
        self.writer.write(p.total_env_steps, scalars)
        losses = {k.split("/", 1)[1]: v for k, v in p.last_stats.items()
                  if k in ("losses/policy", "losses/value", "losses/entropy")}
        line = format_status_line(
            env_steps=p.total_env_steps, target_env_steps=target,
            fps={"10s": scalars["perf/fps_10s"], "60s": scalars["perf/fps_60s"]},
            mean_return=self.episodes.mean_return, mean_length=self.episodes.mean_length,
            policy_lag=p.lag, losses=losses, learning_rate=p.last_stats.get("learner/lr"))
        bar.write(f"{line} | {bottleneck(scalars)}")
        if self.cfg.num_policies > 1 or self.population.wins[0]:
            bar.write(f"  policies: {self.population.summary_line()}")
        bar.update_to(p.total_env_steps)

    def _summary(self, reason: str, started: float, training_started: float,
                 steps_at_start: int) -> RunSummary:
        """`wall_seconds` includes starting the processes; `mean_fps` is over training only."""
        p = self.progress
        now = time.monotonic()
        return RunSummary(
            env_steps=p.total_env_steps, wall_seconds=now - started,
            mean_fps=(p.total_env_steps - steps_at_start) / max(now - training_started, 1e-9),
            mean_return_last_100=self.episodes.mean_return,
            best_mean_return=self.episodes.best_mean_return,
            mean_policy_lag=p.lag_sum / p.lag_reports if p.lag_reports else None,
            experiment=self.cfg.experiment_name, stopped_because=reason)

    # --- signals --------------------------------------------------------------------------------
    def _broadcast_to_samplers_and_learners(self, msg) -> None:
        """Pause or Resume. Learners pause too, so that the final checkpoint is the last
        training state: trajectories that arrive after the pause wait for the next `train`."""
        for w in range(self.cfg.num_workers):
            send_many(self.wiring.rollout_inbox(w), [msg])
        for inbox in self.wiring.learner_inboxes.values():
            send_many(inbox, [msg])

    def _install_signal_handlers(self):
        """While `start` or `train` runs, SIGINT/SIGTERM end it cleanly (a final checkpoint,
        `stopped_because == "interrupted"`); a second SIGINT kills every child and exits at
        once. Returns the function that puts the previous handlers back."""
        if not _in_main_thread():
            return lambda: None
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def handler(signum, frame):
            if self._stop_signal is not None and signum == signal.SIGINT:
                if self.host is not None:
                    self.host.kill_all()
                os._exit(130)
            self._stop_signal = signum
            self.interrupted_by = signum

        for s in previous:
            signal.signal(s, handler)

        def restore():
            for s, h in previous.items():
                signal.signal(s, h)
        return restore

    @property
    def stop_signal(self) -> Optional[int]:
        """The last signal that interrupted `start` or `train`, if any."""
        return self.interrupted_by


def _in_main_thread() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread() and sys.platform != "win32"
