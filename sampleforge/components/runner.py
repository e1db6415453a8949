"""Runner: starts every component, watches them, logs, checkpoints, and decides when to stop.

    runner = Runner(cfg)          # validates, locks and prepares the experiment folder
    runner.start()                # buffers, queues, processes; waits until all have started
    summary = runner.train()      # until train_for_env_steps / train_for_seconds / solved
    summary = runner.train(until_env_steps=2_000_000)   # again, same processes
    runner.close()                # stop message -> SIGTERM -> SIGKILL; unlocks the experiment

Between `train` calls the rollout workers are paused, not respawned. Ctrl-C or SIGTERM during
`train` ends it cleanly with a final checkpoint (`stopped_because == "interrupted"`); a second
Ctrl-C kills every child at once.

In a data-parallel run (`--distributed`, under torchrun) every rank has a runner of its own;
rank 0's serves the run's TCPStore, logs, evaluates and checkpoints, and the others keep their
files in a scratch folder deleted at close. A rank's run ends when any rank's does.

Must not: compute anything about learning; it only reads reports and sends commands.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import shutil
import time
from typing import cast

import torch.distributed as dist

from sampleforge.checkpoint.episode_windows import (
    Window,
    restore_episode_windows,
    save_episode_windows,
)
from sampleforge.checkpoint.experiment_dir import lock_experiment, prepare_experiment
from sampleforge.checkpoint.serial_snapshot import (
    SNAPSHOT_FILENAME,
    Snapshotable,
    SystemState,
    bind_snapshot,
    restore_snapshot,
    save_snapshot,
    take_snapshot,
)
from sampleforge.comms.eval_messages import EvaluationFinished
from sampleforge.comms.hosts import InlineHost, ProcessHost, spawn_problem
from sampleforge.comms.interrupts import Interrupts
from sampleforge.comms.messages import (
    CheckpointFailed,
    CheckpointSaved,
    ComponentFailed,
    ComponentStarted,
    ComponentStopped,
    EpisodesFinished,
    LearnerReady,
    Pause,
    Paused,
    PeersFinished,
    Resume,
    SaveCheckpoint,
    SetHyperparameters,
    TrainingReport,
)
from sampleforge.comms.queues import receive, send_many
from sampleforge.components.supervisor import ComponentDied, Supervisor
from sampleforge.components.wiring import Wiring, check_run_fits, wire
from sampleforge.config import Config, ConfigError, validate_config
from sampleforge.distributed.rank_exchange import EpisodeExchange
from sampleforge.distributed.torchrun_rank import (
    NotLaunchedByTorchrun,
    TorchrunRank,
    rank_config,
    scratch_dir,
    torchrun_rank,
)
from sampleforge.envs.registry import env_info, resolve_env
from sampleforge.evaluation.schedule import TrainingEvaluation
from sampleforge.models.factory import check_model_fits_env, make_policy_model, resolve_device
from sampleforge.pbt.coordinator import PopulationCoordinator
from sampleforge.telemetry import MetricsWriter, ProgressBar, RunSummary, write_summary
from sampleforge.telemetry.run_progress import RunProgress
from sampleforge.telemetry.status import TrainingStatus
from sampleforge.telemetry.training_callback import CallbackSchedule, TrainingCallback
from sampleforge.telemetry.wandb_sink import wandb_problem

log = logging.getLogger(__name__)

# What every component process needs, imported once by the host's fork server (comms/hosts.py).
COMPONENT_MODULES = ("torch", "gymnasium", "sampleforge.components.wiring")

START_TIMEOUT_SEC = 120.0
# A rollout worker builds its envs one after another before it reports started: an ALE env
# takes about 0.1 s to make and reset, so 1,024 envs in one worker take close to two minutes.
START_ALLOWANCE_PER_ENV_SEC = 0.5
STOP_TIMEOUT_SEC = 8.0
CHECKPOINT_TIMEOUT_SEC = 60.0
# How long the end of a `train` call waits for every rollout worker to confirm its pause (and so
# to have flushed its last episodes); a worker that does not (one being replaced after a fault)
# only leaves its last second of statistics out of this call's summary.
PAUSE_TIMEOUT_SEC = 2.0


# Errors whose one line says all a user needs (the fault, where, and what to do): the command
# line leaves their traceback out.
SELF_EXPLAINED_ERRORS = ("EnvFaultError", "NonFiniteTrainingError", "PeerLostError")


class TrainingError(RuntimeError):
    """A component failed; the message names it and carries its error, then its traceback."""

    def __init__(self, message: str, traceback: str = ""):
        super().__init__(f"{message}\n{traceback}" if traceback else message)
        self.message = message
        self.traceback = traceback

    @property
    def self_explained(self) -> bool:
        """Whether the first line says it all (see SELF_EXPLAINED_ERRORS)."""
        error = self.message.split(" failed: ", 1)[-1]
        return error.startswith(tuple(f"{name}:" for name in SELF_EXPLAINED_ERRORS))


class Runner:
    """Owns a training run from start to close; see the module docstring."""

    # Set by `start` (see `started`): shared memory and queues, processes and their supervisor.
    wiring: Wiring
    host: ProcessHost | InlineHost
    supervisor: Supervisor
    writer: MetricsWriter  # progress.csv, TensorBoard, W&B
    population: PopulationCoordinator

    def __init__(self, cfg: Config):
        validate_config(cfg)
        self.rank = _data_parallel_rank(cfg)
        self._scratch: str | None = None  # a rank > 0's private train_dir
        # Rank 0 (or a run of one) logs, checkpoints and writes the summary for every rank.
        self._writes = self.rank is None or self.rank.is_main
        if self.rank is not None:
            if not self.rank.is_main:
                self._scratch = scratch_dir(self.rank)
            cfg = rank_config(cfg, self.rank, self._scratch or cfg.train_dir)
        self.cfg = cfg
        self.env_spec = resolve_env(cfg.env, drop_obs_keys=cfg.obs_keys_to_drop)
        self.env = env_info(cfg.env, drop_obs_keys=cfg.obs_keys_to_drop)
        check_model_fits_env(cfg, self.env)
        self.device = resolve_device(
            cfg.device, None if self.rank is None else self.rank.local_rank
        )
        problems = [
            p for p in (None if cfg.serial_mode else spawn_problem(), wandb_problem(cfg)) if p
        ]
        if problems:  # before anything is written or started
            raise ConfigError(problems)
        check_run_fits(cfg, self.env, self.device)
        # One run per experiment, from before its folder changes until `close`.
        self._lock = lock_experiment(cfg)
        try:
            self.exp, self.resume = prepare_experiment(cfg, self._lock)
        except BaseException:
            self._lock.release()
            raise
        threshold = cfg.stop_at_mean_return
        self.stop_at_mean_return = self.env.reward_threshold if threshold is None else threshold
        self.progress = RunProgress(num_trained_policies=cfg.num_policies)  # public, read-only
        self.started = False
        self._training = False
        self._interrupts = Interrupts(kill_all=self._kill_all)
        self._not_started: set[str] = set()  # components that have not reported started yet
        self._final_checkpoints: dict[int, str] = {}  # policy -> its final checkpoint, written
        self._paused_workers: set[int] = set()  # rollout workers that confirmed the last Pause
        self._resumed_from: dict[int, str | None] = {}  # policy -> checkpoint its learner loaded
        self._newest_checkpoints: dict[int, str] = {}  # policy -> its newest checkpoint
        self._closed = False
        self._stopped_by: int | None = None  # the signal that stopped the last `train` call
        self.evaluation: TrainingEvaluation | None = None  # with eval_every_env_steps
        self._callback: CallbackSchedule | None = None  # set during `train`
        self._train_call = (0, time.monotonic())  # (env steps, time) when `train` began
        self._another_rank_finished = False  # data-parallel runs end on every rank at once
        # Rank 0 serves the store every rank's learners meet at (before any of them starts).
        self._store: dist.TCPStore | None = None
        self._episodes: EpisodeExchange | None = None
        if self.rank is not None:
            self._store = self.rank.open_store(cfg.distributed_timeout_sec, serve=True)
            self._episodes = EpisodeExchange(self._store, self.rank)

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Allocate shared memory and queues, start every component, wait until all run.

        SIGINT/SIGTERM during `start` and `train` end them cleanly (`Interrupts`); between
        calls the caller's own handlers are in place. A runner is started once: a start that
        failed closed it, the experiment's lock released, and a closed runner stays closed."""
        if self._closed:
            raise RuntimeError(
                "this runner is closed (closed, or its start failed): make a new one"
            )
        with self._interrupts.handled(), self._component_threads():
            self._start()

    def _start(self) -> None:
        self.wiring = wire(
            self.cfg, self.env_spec, self.env, self.device, self.exp, self.resume, self.rank
        )
        self.evaluation = TrainingEvaluation.for_run(self.cfg, self.wiring.evaluation_inboxes)
        self.population = PopulationCoordinator(
            self.cfg,
            self.wiring,
            self.exp.path,
            self.env.reward_shaping,
            self.resume,
            episodes=self.progress.episodes,
        )
        self.host = (
            InlineHost(self.wiring.report_queue)
            if self.cfg.serial_mode
            else ProcessHost(
                self.wiring.report_queue,
                on_exit=self.wiring.release_locks_held_by,
                preload=COMPONENT_MODULES,
            )
        )
        self.supervisor = Supervisor(
            cfg=self.cfg,
            host=self.host,
            wiring=self.wiring,
            is_training=lambda: self._training,
            has_started=lambda name: name not in self._not_started,
        )
        self.writer = MetricsWriter.for_run(self.cfg, self.exp.path)
        self.started = True
        try:
            for spec in self.wiring.specs:  # learner first: it publishes the initial weights
                self.host.start(spec)
            self._wait_started()
            if self.resume:
                restore_episode_windows(self.exp.path, self._resumed_from, self._windows())
            self._restore_serial_snapshot()
            self.population.send_current_hyperparameters()
        except BaseException:
            self.close()
            raise

    def _wait_started(self) -> None:
        self._not_started = {spec.name for spec in self.wiring.specs}
        timeout = START_TIMEOUT_SEC + START_ALLOWANCE_PER_ENV_SEC * self.cfg.num_envs_per_worker
        self._pump_until(
            lambda: not self._not_started or self._interrupts.requested is not None,
            timeout,
            lambda: (
                f"components did not start within {timeout:.0f} s: "
                f"{', '.join(sorted(self._not_started))}"
            ),
        )

    def _pump(self, wait_for_reports: float = 0.05, wait_for_exits: float = 0.0) -> None:
        """One turn of every loop of the runner: inline components run (serial mode), or
        processes are waited on for up to `wait_for_exits`; reports are handled, waiting up to
        `wait_for_reports` for the first; dead processes are dealt with."""
        serial = self.cfg.serial_mode
        self.host.poll(0.0 if serial else wait_for_exits)
        for msg in receive(self.wiring.report_queue, 0.0 if serial else wait_for_reports):
            self._on_report(msg)
        if self._episodes is not None:
            for msg in self._episodes.receive():  # rank 0: the other ranks' episodes count too
                self._on_report(msg)
        self._check_processes()

    def _pump_until(self, done, timeout: float, failure) -> None:
        """Pump until `done()`; TrainingError(`failure()`) after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TrainingError(failure())
            self._pump()

    def train(
        self,
        until_env_steps: int | None = None,
        seconds: float | None = None,
        callback: TrainingCallback | None = None,
        callback_every_env_steps: int | None = None,
    ) -> RunSummary:
        """Train until `until_env_steps` total env steps (default: cfg.train_for_env_steps),
        `seconds` (default: cfg.train_for_seconds) or the return target; then pause.

        `callback(status)` runs in this loop after every learner iteration, or every
        `callback_every_env_steps` env steps; returning False stops training
        (`stopped_because == "callback"`). Its exceptions propagate."""
        started = time.monotonic()
        if not self.started:
            self.start()
        self._stopped_by = self._interrupts.requested
        if self._interrupts.requested is not None:
            # Interrupted while starting: nothing was trained, the previous checkpoint stands.
            self._interrupts.requested = None
            return self._summary("interrupted", started, started, self.progress.total_env_steps)
        steps_at_start = self.progress.total_env_steps
        self._train_call = (steps_at_start, started)
        self._callback = CallbackSchedule.of(
            callback, callback_every_env_steps, steps_at_start, self.progress.lag_reports
        )
        target = until_env_steps or self.cfg.train_for_env_steps
        seconds = self.cfg.train_for_seconds if seconds is None else seconds
        with self._interrupts.handled(clear_after=True), self._component_threads():
            return self._train(started, target, seconds)

    def _train(self, started: float, target: int, seconds: float | None) -> RunSummary:
        steps_at_start = self.progress.total_env_steps
        training_started = time.monotonic()
        self.progress.restart_fps()
        bar = ProgressBar(target, initial=steps_at_start)
        self._training = True
        self.wiring.send_to_samplers_and_learners(Resume())
        snapshot = False
        try:
            reason = self._loop(target, seconds, started, bar)
            self._stopped_by = self._interrupts.requested
            if self.cfg.serial_mode and self.cfg.serial_snapshot:  # before anything reacts
                snapshot = self._save_serial_snapshot()
        except BaseException:
            # A callback's error (or a failed component): nothing samples or trains on with
            # nobody reading its reports while the caller decides; the last checkpoint stands.
            with contextlib.suppress(Exception):
                self.wiring.send_to_samplers_and_learners(Pause())
            raise
        finally:
            bar.close()
            self._training = False
        self._paused_workers = set()
        self.wiring.send_to_samplers_and_learners(Pause())
        self._save_checkpoint(final=True)
        if snapshot:  # it continues exactly these checkpoints, and no others
            bind_snapshot(self.exp.path / SNAPSHOT_FILENAME, self._final_checkpoints)
        self._await_paused_workers()  # and with them the statistics they flushed
        self._save_episode_windows()  # with those statistics, for the final checkpoints
        summary = self._summary(reason, started, training_started, steps_at_start)
        write_summary(self.exp.summary_path, summary)
        return summary

    def close(self) -> None:
        """Stop every component and release all resources, the experiment's lock last.
        Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        # After a Ctrl-C stopped the last call, this is the clean-up a second one cuts short.
        with self._interrupts.handled(stopping=self._stopped_by):
            try:
                if self.started:
                    self._stop_components()
            finally:
                self._lock.release()
                if self._scratch is not None:
                    shutil.rmtree(self._scratch, ignore_errors=True)

    def _stop_components(self) -> None:
        try:
            self.supervisor.stop_all(STOP_TIMEOUT_SEC)
        finally:
            self.writer.close()
            self.wiring.release_shared_tensors()
            self.wiring.slots.close()

    def _kill_all(self) -> None:
        if self.started:
            self.host.kill_all()

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _component_threads(self):
        return InlineHost.torch_threads() if self.cfg.serial_mode else contextlib.nullcontext()

    # --- the loop -------------------------------------------------------------------------------
    def _loop(self, target: int, seconds: float | None, started: float, bar) -> str:
        last_status = last_save = time.monotonic()
        while True:
            self._pump(wait_for_reports=0.0, wait_for_exits=0.05)  # reports come in batches
            if self.evaluation is not None:
                self.evaluation.maybe_request(self.progress.total_env_steps)
            if self.population.step(self.progress.total_env_steps):
                self._request_checkpoint(final=False)  # the round's copies, with its PBT state
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

    def _stop_reason(self, target: int, seconds: float | None, elapsed: float) -> str:
        if self._interrupts.requested is not None:
            return "interrupted"
        if self._another_rank_finished:
            return "another_rank"
        if self.progress.total_env_steps >= target:
            return "train_for_env_steps"
        if seconds is not None and elapsed >= seconds:
            return "train_for_seconds"
        target_return = self.stop_at_mean_return
        if target_return is None or not math.isfinite(target_return):
            return ""
        mean = self._judged_mean_return()
        return "stop_at_mean_return" if mean is not None and mean >= target_return else ""

    def _judged_mean_return(self) -> float | None:
        """What stop_at_mean_return judges (`stop_on`): the last 100 training episodes' mean
        once there are 100, or the latest evaluation's."""
        if self.cfg.stop_on == "evaluation":
            return None if self.evaluation is None else self.evaluation.latest_mean_return()
        episodes = self.progress.episodes
        return episodes.mean_return if episodes.count >= episodes.maxlen else None

    def _callback_stop(self) -> str:
        """ "callback" if the training callback is due and asks to stop, else ""."""
        p = self.progress
        if self._callback is None or not self._callback.due(p.total_env_steps, p.lag_reports):
            return ""
        return "callback" if self._callback.wants_stop(self.status()) else ""

    def status(self) -> TrainingStatus:
        """The run's current statistics (what a training callback receives)."""
        return self.progress.status(*self._train_call)

    def _on_report(self, msg) -> None:
        if self.progress.record(msg):  # statistics; some also concern the population
            if isinstance(msg, EpisodesFinished):
                self.population.on_episodes(msg)
                if self._episodes is not None:
                    self._episodes.send(msg)  # ranks > 0: to rank 0, which reports them
            elif isinstance(msg, TrainingReport):
                self.population.on_training(msg)
            elif isinstance(msg, LearnerReady):
                self._resumed_from[msg.policy_id] = msg.resumed_from
                if msg.resumed_from:
                    self._newest_checkpoints[msg.policy_id] = msg.resumed_from
            elif isinstance(msg, CheckpointSaved):
                self._on_checkpoint_saved(msg)
        elif isinstance(msg, ComponentStarted):
            self._not_started.discard(msg.component)
        elif isinstance(msg, Paused):
            self._paused_workers.add(msg.worker)
        elif isinstance(msg, PeersFinished):
            self._another_rank_finished = True
        elif isinstance(msg, EvaluationFinished) and self.evaluation is not None:
            self.evaluation.on_finished(msg, self.writer)
        elif isinstance(msg, CheckpointFailed):
            self._on_checkpoint_failed(msg)
        elif isinstance(msg, ComponentFailed):
            raise TrainingError(f"{msg.component} failed: {msg.error}", msg.traceback)
        elif not isinstance(msg, ComponentStopped):
            raise TypeError(f"runner: unexpected report {msg!r}")

    def _check_processes(self) -> None:
        if self._closed or not self.started:
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

    def _await_paused_workers(self) -> None:
        """Pump until every rollout worker has confirmed the Pause, or PAUSE_TIMEOUT_SEC."""
        workers = len(self.wiring.rollout_inboxes)
        deadline = time.monotonic() + PAUSE_TIMEOUT_SEC
        while len(self._paused_workers) < workers and time.monotonic() < deadline:
            self._pump(wait_for_reports=0.02)

    # --- checkpoints ----------------------------------------------------------------------------
    def load_weights(self, state_dicts: dict[int, dict]) -> None:
        """Between `train` calls (Python API): each learner loads its policy's new weights
        (`{policy_id: state_dict}`), republishes them and checkpoints them; returns once the
        checkpoints are written (queued behind `LoadWeights`, they acknowledge it)."""
        if not self.started:
            self.start()
        model = make_policy_model(self.cfg, self.env.observation_space, self.env.action_space)
        for policy_id, state_dict in state_dicts.items():
            model.load_state_dict(state_dict)
            self.wiring.send_weights_to_learner(policy_id, model)
        self._save_checkpoint(final=True, score=False)

    def set_hyperparameters(self, policy_id: int, values: dict[str, float]) -> None:
        """Between `train` calls or from a training callback (Python API): `policy_id`'s
        learner uses these values from the next dataset it trains on (its inbox is read
        between datasets; between calls, ahead of the next Resume). The caller checks the
        names (`learners/registry.py: learner_hyperparameters`): a learner fails on a name it
        does not know."""
        if not self.started:
            self.start()
        self.wiring.send_to_learner(policy_id, [SetHyperparameters(dict(values))])

    def _on_checkpoint_saved(self, msg: CheckpointSaved) -> None:
        self._newest_checkpoints[msg.policy_id] = msg.path
        self._save_episode_windows()
        self.population.checkpoint_written(msg.policy_id)
        if msg.final:
            self._final_checkpoints[msg.policy_id] = msg.path
            log.info("final checkpoint of policy %d: %s", msg.policy_id, msg.path)

    def _on_checkpoint_failed(self, msg: CheckpointFailed) -> None:
        """A full disk need not end a long run: a periodic checkpoint is tried again at the
        next period; a final one (the end of a call, new weights) fails the call."""
        self.population.checkpoint_failed(msg.policy_id)
        newest = self._newest_checkpoints.get(msg.policy_id) or "none yet"
        if msg.final:
            raise TrainingError(
                f"the final checkpoint of policy {msg.policy_id} was not written: {msg.error}; "
                f"the newest one written is {newest}"
            )
        log.warning(
            "checkpoint of policy %d not written: %s; training goes on, the newest "
            "checkpoint is %s, the next try in %.0f s",
            msg.policy_id,
            msg.error,
            newest,
            self.cfg.save_every_sec,
        )

    def _save_episode_windows(self) -> None:
        if self._writes and len(self._newest_checkpoints) == self.cfg.num_policies:
            save_episode_windows(self.exp.path, self._newest_checkpoints, self._windows())

    def _windows(self) -> dict[str, Window]:
        """The episode windows a resume continues: the run's, which holds each policy's."""
        return {"run": self.progress.episodes}

    def _request_checkpoint(self, final: bool, score: bool = True) -> None:
        if not self._writes:
            return  # rank 0 checkpoints the (identical) state of every rank
        self.population.checkpoint_requested()
        for p, inbox in self.wiring.learner_inboxes.items():
            # None: not a candidate for the best checkpoint.
            mean_return = self.population.returns[p].mean_return if score else None
            send_many(inbox, [SaveCheckpoint(final=final, mean_return=mean_return)])

    def _save_checkpoint(self, final: bool, score: bool = True) -> None:
        """Ask every learner for a checkpoint and wait until they are written."""
        self._final_checkpoints = {}
        if not self._writes:
            return
        self._request_checkpoint(final, score)
        self._pump_until(
            lambda: len(self._final_checkpoints) == self.cfg.num_policies,
            CHECKPOINT_TIMEOUT_SEC,
            lambda: f"no checkpoint written within {CHECKPOINT_TIMEOUT_SEC:.0f} s",
        )

    # --- exact resume in serial mode (checkpoint/serial_snapshot.py) -----------------------------
    def _save_serial_snapshot(self) -> bool:
        path, counters = self.exp.path / SNAPSHOT_FILENAME, self.progress.counters()
        return save_snapshot(path, self.cfg, counters, self._system_state())

    def _restore_serial_snapshot(self) -> None:
        path = self.exp.path / SNAPSHOT_FILENAME
        state = take_snapshot(path, self.cfg, self._resumed_from) if self.resume else None
        if state is None:
            return
        self.progress.restore_counters(restore_snapshot(state, self._system_state()))
        log.info("exact resume: every component continues from where the last run stopped")

    def _system_state(self) -> SystemState:
        assert isinstance(self.host, InlineHost), "serial mode runs its components inline"
        return SystemState(
            # Every component a serial run hosts has snapshot_state/restore_state.
            components=cast(dict[str, Snapshotable], self.host.components),
            queues=self.wiring.queues(),
            tensors=self.wiring.shared_tensors(),
        )

    # --- reporting ------------------------------------------------------------------------------
    def _report_status(self, bar, target: int) -> None:
        if not self._writes:
            return  # rank 0 logs for every rank
        p = self.progress
        scalars = {**p.scalars(), **self.supervisor.health_metrics(), **self.population.scalars()}
        self.writer.write(p.total_env_steps, scalars)
        bar.write(p.status_line(scalars, target))
        if self.cfg.num_policies > 1 or self.population.wins[0]:
            bar.write(f"  policies: {self.population.summary_line()}")
        bar.update_to(p.total_env_steps)

    def _summary(
        self, reason: str, started: float, training_started: float, steps_at_start: int
    ) -> RunSummary:
        name = self.cfg.experiment_name
        best_eval = None if self.evaluation is None else self.evaluation.best_mean_return
        summary = self.progress.summary(
            reason, name, started, training_started, steps_at_start, best_eval
        )
        world_size = 1 if self.rank is None else self.rank.world_size
        return dataclasses.replace(summary, world_size=world_size)

    @property
    def stop_signal(self) -> int | None:
        """The last signal that interrupted `start`, `train` or `close`, if any."""
        return self._interrupts.last


def _data_parallel_rank(cfg: Config) -> TorchrunRank | None:
    """This process's rank under torchrun with `--distributed`; None without it."""
    if not cfg.distributed:
        return None
    try:
        return torchrun_rank()
    except NotLaunchedByTorchrun as e:
        raise ConfigError([str(e)]) from None
