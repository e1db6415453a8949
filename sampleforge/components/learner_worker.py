"""Learner worker: the process shell around a policy's learner, whichever algorithm it runs.

The registry (`learners/registry.py`) builds its three parts for `--algorithm`: a learner that
trains, a stager for arrived trajectories and a sampling gate (`learners/protocols.py`). The
shell receives finished trajectories, lets the stager stage them, trains when it is ready,
publishes the weights after every SGD step (`SharedPolicyWeights`), reports statistics, and
writes checkpoints when the runner asks.

Staging overlaps training: after every SGD step the worker stages the trajectories that have
arrived meanwhile (into the batcher's back area, or the replay), so their slots go back to the
rollout workers at once and the next dataset is ready when this one is done; commands that
arrive meanwhile are acted on after the dataset.

Back-pressure (the gate): after every SGD step, and whenever it is idle, the learner tells
rollout workers how many trajectory slots may be on their way to it, so a slow learner gets
fresh data instead of a growing backlog and no sample is dropped for being stale.

It owns the policy's training state: on start it resumes from the newest valid checkpoint if
asked to.

Data-parallel runs (`--distributed`, `distributed/`): the worker joins its policy's learner
group across the ranks, starts from rank 0's state, and trains in rounds: it meets the other
ranks whenever it has data, is paused or is stopping, and they decide together
(`distributed/rounds.py`) how much each trains, so every rank makes the same SGD steps with
gradients averaged over all; env steps are counted over all ranks.

Must not: decide when training ends or when to checkpoint (the runner does).
"""

from __future__ import annotations

import copy
import logging
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from sampleforge.buffers.replay import ReplaySettingsChanged
from sampleforge.buffers.shared_weights import SharedPolicyWeights
from sampleforge.buffers.slot_pool import SlotPool
from sampleforge.buffers.trajectory_buffer import SharedTrajectoryBuffer
from sampleforge.checkpoint.store import CheckpointStore
from sampleforge.comms.messages import (
    CheckpointFailed,
    CheckpointSaved,
    CopyPolicy,
    HandOverCheck,
    LearnerReady,
    LoadWeights,
    Pause,
    PeersFinished,
    PublishSnapshot,
    Resume,
    SaveCheckpoint,
    SetHyperparameters,
    StagedSteps,
    Stop,
    TrainingReport,
    TrajectoryReady,
)
from sampleforge.comms.queues import receive, send_many
from sampleforge.config import Config
from sampleforge.config.ranges import learner_seed
from sampleforge.distributed.learner_group import LearnerGroup, peer_errors
from sampleforge.distributed.rounds import RankRow, decide
from sampleforge.distributed.torchrun_rank import TorchrunRank
from sampleforge.learners.registry import LearnerSite, make_learner_parts
from sampleforge.learners.thread_count_tuner import TRIAL_EVERY_SECONDS, ThreadCountTuner
from sampleforge.telemetry.bottleneck import LEAD_AT_CAP

log = logging.getLogger(__name__)

# The checkpoint's entry for the stager's state (the replay), with --save_replay.
STAGER_KEY = "stager"
# The checkpoint's entry for the dataset size grown to (--max_batch_size).
SIZER_KEY = "dataset_sizer"


@dataclass(frozen=True)
class LearnerEndpoints:
    """What a learner worker reads and writes; built by the wiring."""

    buffer: SharedTrajectoryBuffer
    # Every policy's shared weights: ours to publish, the others' to copy (PBT) and the
    # frozen opponents' to fill with snapshots.
    weights: dict[int, SharedPolicyWeights]
    incoming_weights: SharedPolicyWeights  # set from outside: see LoadWeights
    inbox: Any  # finished trajectories and the runner's commands
    slots: SlotPool
    report_queue: Any


class LearnerWorker:
    """Trains one policy from the trajectories that reach its inbox."""

    def __init__(
        self,
        *,
        cfg: Config,
        policy_id: int,
        endpoints: LearnerEndpoints,
        observation_space: gym.Space,
        action_space: gym.Space,
        device: torch.device,
        checkpoint_dir: str,
        frameskip: int,
        resume: bool,
        rank: TorchrunRank | None = None,
    ):
        self.name = f"learner_p{policy_id}"
        self.cfg = cfg
        self.policy_id = policy_id
        self.inbox = endpoints.inbox
        self.ledger = endpoints.slots.ledger
        self.report_queue = report_queue = endpoints.report_queue
        self.all_weights = weights = endpoints.weights
        self.incoming_weights = endpoints.incoming_weights
        self.weights = weights[policy_id]
        self.running = True
        self.paused = True  # trains only between the runner's Resume and Pause
        if cfg.seed is not None:
            torch.manual_seed(learner_seed(cfg.seed, policy_id))
        parts = make_learner_parts(
            cfg,
            LearnerSite(
                observation_space=observation_space,
                action_space=action_space,
                device=device,
                frameskip=frameskip,
                policy_id=policy_id,
                buffer=endpoints.buffer,
                slots=endpoints.slots,
            ),
        )
        self.learner, self.stager, self.gate = parts.learner, parts.stager, parts.gate
        self._rows_per_slot = endpoints.buffer.layout.rows_per_slot
        self._rows_arrived = [0, 0]  # this policy's trajectories, and the slots they came in
        self.sizer = parts.sizer
        self.tuner = self._thread_count_tuner(rank)
        self.store = CheckpointStore(Path(checkpoint_dir), keep_last=cfg.keep_checkpoints)
        resumed_from, note = self._resume() if resume else (None, None)
        self.group = None if rank is None else self._join(rank, device)
        self.weights.publish(self.learner.model, self.learner.policy_version)
        if policy_id == 0:  # frozen opponents start as the first policy's initial weights
            for frozen in range(cfg.num_policies, len(weights)):
                weights[frozen].publish(self.learner.model, 0)
        send_many(
            report_queue,
            [
                LearnerReady(
                    policy_id,
                    self.learner.env_steps,
                    self.learner.policy_version,
                    resumed_from,
                    note,
                )
            ],
        )
        self._train_seconds = 0.0
        self._work_per_step: tuple | None = None  # what the tuner's steps a second measure
        self._arrived: deque[TrajectoryReady] = deque()
        self._reported_env_steps = self.learner.env_steps
        self._trained = False  # since this process started
        self._deferred: list = []  # commands that arrived during a dataset's training
        # Data-parallel rounds: what this worker was told, and what the ranks agreed.
        self._stopping = False  # the runner sent Stop
        self._resumed_once = False  # the runner has begun training at least once
        self._halted = False  # the ranks have stopped meeting
        self._told_peers_finished = False
        self._synced_env_steps = self.learner.env_steps
        self._last_dataset: Any = None  # with sync_fraction < 1: the last dataset trained on
        self._rounds_followed = 0  # rounds this rank took part in without data

    def _thread_count_tuner(self, rank: TorchrunRank | None) -> ThreadCountTuner | None:
        """With learner_threads_adaptive: the tuner of this process's torch threads. Not in
        data-parallel runs (rounds pace every rank by the slowest: no rank could time its own)
        nor in serial mode (the components share the caller's thread count)."""
        cfg = self.cfg
        if not cfg.learner_threads_adaptive or cfg.learner_torch_threads < 2:
            return None
        if rank is not None or cfg.serial_mode:
            return None
        # Learners of several policies start together: offset their trials so that no two
        # keep measuring each other's.
        every = TRIAL_EVERY_SECONDS + 11.0 * self.policy_id
        return ThreadCountTuner(
            cfg.learner_torch_threads, name=self.name, trial_every_seconds=every
        )

    def _join(self, rank: TorchrunRank, device: torch.device) -> LearnerGroup:
        """Join the policy's learner group and continue from rank 0's state (its checkpoint,
        or its fresh initialisation: ranks are seeded differently)."""
        group = LearnerGroup(rank, self.policy_id, device, self.cfg.distributed_timeout_sec)
        with peer_errors(self.policy_id):
            state = group.broadcast_state(self.learner.state_dict() if rank.is_main else None)
        if not rank.is_main:
            self.learner.load_state_dict(state)
        self.learner.data_parallel = group
        group.share_running_statistics(self.learner.model)
        return group

    def _resume(self) -> tuple[str | None, str | None]:
        """Load the newest valid checkpoint, if any; returns its path, and what it did not
        hold that a run saving everything would have (for the log)."""
        loaded = self.store.load_latest(map_location=self.learner.device)
        if loaded is None:
            return None, None
        state, path = loaded
        stager_state = state.pop(STAGER_KEY, None)
        sizer_state = state.pop(SIZER_KEY, None)
        self.learner.load_state_dict(state)
        if self.sizer is not None and sizer_state is not None:
            self.sizer.load_state_dict(sizer_state)
        if stager_state is None:
            return str(path), self._refill_note(
                "the checkpoint holds no replay (--save_replay false)"
            )
        try:
            self.stager.load_lasting_state(stager_state)
        except ReplaySettingsChanged as changed:
            # Resuming with more envs or another replay size is allowed: the run goes on
            # with the new settings and a replay refilled under them.
            return str(path), self._refill_note(f"{changed}, so it is not loaded")
        return str(path), None

    def _refill_note(self, why: str) -> str | None:
        refill = self.stager.unsaved_state_note()
        return None if refill is None else f"{why}: {refill}"

    def poll(self, timeout: float) -> None:
        """Stage arrived trajectories and handle commands; train whenever a dataset is complete."""
        busy = not self.paused and (bool(self._arrived) or self.stager.ready())
        deferred, self._deferred = self._deferred, []
        for msg in deferred + receive(self.inbox, 0.0 if busy else timeout):
            self._handle(msg)
        if not self.running:
            return  # stopping: don't start another training iteration
        while self._arrived and self.stager.has_room():
            self.stager.add(self._arrived.popleft())
        self.stager.return_slots()
        self._gate_sampling()
        if self.group is not None:
            with peer_errors(self.policy_id):
                self._meet()
        elif self.stager.ready() and not self.paused:
            self._train()
        if not self._trained and self.learner.env_steps > self._reported_env_steps:
            self._report_staged_steps()

    def _meet(self) -> None:
        """One data-parallel round, when there is something to meet about (see rounds.py)."""
        assert self.group is not None
        if self._halted:
            self.running = not self._stopping
            return
        ready = 0 if self.paused else self.stager.ready_items
        stragglers_allowed = self.cfg.sync_fraction < 1.0  # then meet at every poll
        if not (ready or self.paused or self._stopping or stragglers_allowed):
            return
        row = RankRow(
            stopping=self._stopping,
            finishing=self.paused and self._resumed_once,
            waiting=self.paused and not self._resumed_once,
            ready_items=ready,
            new_env_steps=self.learner.env_steps - self._synced_env_steps,
            can_follow=self._last_dataset is not None,
        )
        decision = decide(self.group.gather(row), self.cfg.sync_fraction)
        self._add_env_steps(decision.env_steps)
        if decision.halt:
            self._halted = True
            self.running = not self._stopping
        if decision.peers_finished and not self.paused and not self._told_peers_finished:
            self._told_peers_finished = True
            send_many(self.report_queue, [PeersFinished(self.policy_id)])
        if decision.items and decision.follows and decision.follows[self.group.rank]:
            self._follow()
        elif decision.items:
            self._train(limit=decision.items)

    def _follow(self) -> None:
        """A straggler's part in a round (sync_fraction): the same SGD steps as the others, on
        its last dataset, with weight 0; its own new data waits for a later round."""
        assert self.group is not None and self._last_dataset is not None
        env_steps = self.learner.env_steps
        self.group.weight = 0.0
        try:
            self.learner.train(self._last_dataset, self._publish)
        finally:
            self.group.weight = 1.0
        self.learner.env_steps = env_steps  # it trained on nothing new
        self._rounds_followed += 1
        self._add_env_steps(self.group.total(0))

    def _add_env_steps(self, every_ranks: int) -> None:
        """Count the new env steps of every rank (the same number on all)."""
        self._synced_env_steps += every_ranks
        self.learner.env_steps = self._synced_env_steps

    def close(self) -> None:
        self.stager.close()
        if self.group is not None:
            self.group.close()

    def snapshot_state(self) -> dict:
        """Training state plus the trajectories staged or waiting, for an exact resume."""
        return {
            "learner": self.learner.state_dict(),
            "stager": self.stager.state_dict(),
            "arrived": list(self._arrived),
            "deferred": list(self._deferred),
            "rows_arrived": list(self._rows_arrived),
            "sizer": None if self.sizer is None else self.sizer.state_dict(),
        }

    def restore_state(self, state: dict) -> None:
        self.learner.load_state_dict(state["learner"])
        self.stager.load_state_dict(state["stager"])
        self._arrived = deque(state["arrived"])
        self._deferred = list(state.get("deferred", []))
        self._rows_arrived = list(state.get("rows_arrived", [0, 0]))
        if self.sizer is not None and state.get("sizer") is not None:
            self.sizer.load_state_dict(state["sizer"])
        if self._rows_arrived[1]:
            self.gate.set_rows_per_slot(self._rows_arrived[0] / self._rows_arrived[1])

    def _handle(self, msg) -> None:
        if isinstance(msg, TrajectoryReady):
            self._arrival(msg)
        elif isinstance(msg, HandOverCheck):
            self._check_hand_over(msg)
        elif isinstance(msg, SaveCheckpoint):
            self._save(msg)
            self._not_training()
        elif isinstance(msg, LoadWeights):
            self._load_incoming_weights(msg.version)
            self._not_training()
        elif isinstance(msg, CopyPolicy):
            self._copy_policy(msg.source_policy)
            self._not_training()
        elif isinstance(msg, SetHyperparameters):
            self.learner.set_hyperparameters(msg.values)
        elif isinstance(msg, PublishSnapshot):
            # Versions only need to differ from the last one the frozen inference worker saw.
            frozen = self.all_weights[msg.frozen_policy]
            frozen.publish(self.learner.model, frozen.version + 1)
        elif isinstance(msg, Stop):
            # A data-parallel learner leaves only once the other ranks know (see _meet).
            self._stopping = True
            self.running = self.group is not None
        elif isinstance(msg, (Pause, Resume)):
            self.paused = isinstance(msg, Pause)
            self._resumed_once |= not self.paused
            if self.paused:
                self._not_training()
        else:
            raise TypeError(f"{self.name}: unexpected message {msg!r}")

    def _arrival(self, msg: TrajectoryReady) -> None:
        """Queued to be staged in order, never more than one dataset ahead (`has_room`)."""
        self._arrived.append(msg)
        self._rows_arrived[0] += self._rows_per_slot if msg.rows is None else len(msg.rows)
        self._rows_arrived[1] += 1
        self.gate.set_rows_per_slot(self._rows_arrived[0] / self._rows_arrived[1])

    def _check_hand_over(self, msg: HandOverCheck) -> None:
        """A dead worker's hand-over of `msg.slot`: anything it sent came before this, so a
        slot still ours to copy with no message waiting lost its message; let it go."""
        ledger = self.ledger
        current = int(ledger.hand_overs[msg.slot]) == msg.hand_over
        ours = bool(ledger.slot_readers[msg.slot, self.policy_id])
        waiting = any(m.slot == msg.slot for m in self._arrived)
        if current and ours and not waiting:
            log.warning(
                "%s: the message for slot %d was lost with its rollout worker; slot freed",
                self.name,
                msg.slot,
            )
            self.stager.drop(msg.slot, msg.returns_slot)
            self._gate_sampling()

    def _load_incoming_weights(self, version: int) -> None:
        """Take the weights the runner published for us (nobody publishes there meanwhile: the
        runner waits for the checkpoint queued behind LoadWeights)."""
        got = self.incoming_weights.pull(self.learner.model, have_version=-1)
        if got != version:
            raise RuntimeError(
                f"{self.name}: incoming weights are at version {got}, expected {version}"
            )
        self.learner.weights_replaced()
        self._publish()

    def _train(self, limit: int | None = None) -> None:
        self._trained = True
        t0 = time.perf_counter()
        self.gate.set_sgd_steps_per_dataset(self.learner.sgd_steps_per_dataset)
        waited_before = self.gate.waited_seconds
        self.gate.training_started(self.stager.filled)
        waited = self.gate.waited_seconds - waited_before
        self._gate_sampling()
        data = self.stager.take(limit)
        if self.cfg.sync_fraction < 1.0:  # what a straggler takes part with (see _follow)
            self._last_dataset = data.clone()
        stats = self.learner.train(data, self._on_sgd_step)
        if self.group is not None:  # every rank trained this round: count all their steps
            self._add_env_steps(self.group.total(self.learner.env_steps - self._synced_env_steps))
        self.stager.consume()
        self.gate.training_done()
        busy = time.perf_counter() - t0
        if self.sizer is not None:
            trajectories = self.sizer.dataset_trained(busy, waited, self.gate.lead_at_cap)
            stats["learner/dataset_size"] = float(trajectories * self.cfg.rollout)
        # The dataset just trained on may have ended the early epochs.
        self.gate.set_sgd_steps_per_dataset(self.learner.sgd_steps_per_dataset)
        if self.tuner is not None:
            self._check_work_per_step(stats)
        self._gate_sampling()
        self._train_seconds += busy
        stats["perf/learner_train_sec"] = self._train_seconds
        stats["perf/learner_wait_sec"] = self.gate.waited_seconds
        if self.group is not None:
            stats["perf/allreduce_sec"] = self.group.allreduce_seconds
            stats["learner/rounds_followed"] = float(self._rounds_followed)
        stats["learner/sampling_lead_sgd_steps"] = float(self.gate.lead)
        stats[LEAD_AT_CAP] = float(self.gate.lead_at_cap)
        send_many(
            self.report_queue,
            [
                TrainingReport(
                    self.policy_id,
                    self.learner.env_steps,
                    self.learner.policy_version,
                    stats,
                    stats.pop("policy_lag/min"),
                    stats.pop("policy_lag/mean"),
                    stats.pop("policy_lag/max"),
                )
            ],
        )

    def _check_work_per_step(self, stats: dict[str, float]) -> None:
        assert self.tuner is not None
        # Work per SGD step that changed (the early epochs ended, datasets doubled) would
        # change the steps a second with any thread count: measure afresh.
        work = (self.learner.sgd_steps_per_dataset, stats.get("learner/dataset_size"))
        if work != self._work_per_step:
            if self._work_per_step is not None:
                self.tuner.interrupted()
            self._work_per_step = work
        stats.update(self.tuner.report())

    def _not_training(self) -> None:
        """Time that is not training passed, or will (see ThreadCountTuner.interrupted): nor
        is it waiting for data."""
        self.gate.interrupted()
        if self.tuner is not None:
            self.tuner.interrupted()

    def _report_staged_steps(self) -> None:
        """The env steps staged while there is too little data to train (a replay filling up to
        `learning_starts`); a training report carries them from then on."""
        self._reported_env_steps = self.learner.env_steps
        send_many(self.report_queue, [StagedSteps(self.policy_id, self._reported_env_steps)])

    def _copy_policy(self, source: int) -> None:
        """Continue from the weights `source` last published (PBT replacement)."""
        model = copy.deepcopy(self.learner.model)
        self.all_weights[source].pull(model, -1)
        self.learner.copy_policy(model)
        self._publish()

    def _publish(self) -> None:
        self.weights.publish(self.learner.model, self.learner.policy_version)

    def _on_sgd_step(self) -> None:
        # Stage first: on CUDA the step's kernels are still running, and publishing waits for
        # them, so arrivals are copied (on their own stream) while the GPU computes.
        self._stage_arrivals()
        self._publish()
        self.gate.sgd_step_done()
        self._gate_sampling()
        if self.tuner is not None:  # between SGD steps: no parallel region is running
            self.tuner.trained(1)

    def _stage_arrivals(self) -> None:
        """Between SGD steps: stage what arrived; keep commands for after the dataset."""
        for msg in receive(self.inbox, 0.0):
            if isinstance(msg, TrajectoryReady):
                self._arrival(msg)
            else:
                self._deferred.append(msg)
        while self._arrived and self.stager.has_room():
            self.stager.add(self._arrived.popleft())
        self.stager.return_slots()

    def _gate_sampling(self) -> None:
        self.gate.update(self.stager.filled)

    def _save(self, msg: SaveCheckpoint) -> None:
        self.learner.assert_finite()
        state = self.learner.state_dict()
        if self.sizer is not None:
            state[SIZER_KEY] = self.sizer.state_dict()
        lasting = self.stager.lasting_state() if self.cfg.save_replay else None
        try:
            path = self.store.save(
                state if lasting is None else {**state, STAGER_KEY: lasting},
                env_steps=self.learner.env_steps,
                policy_version=self.learner.policy_version,
                mean_return=msg.mean_return,
                # The best checkpoint is for its weights (enjoy, eval, export): without the
                # replay, which would otherwise be on disk once more at every new best.
                best_state=None if lasting is None else state,
            )
        except OSError as error:  # the store wrote nothing and deleted nothing
            # The runner decides: a periodic checkpoint is tried again, a final one fails.
            failed = CheckpointFailed(
                self.policy_id, f"{error} ({self.store.directory})", msg.final
            )
            send_many(self.report_queue, [failed])
            return
        send_many(
            self.report_queue,
            [CheckpointSaved(self.policy_id, str(path), self.learner.env_steps, msg.final)],
        )
