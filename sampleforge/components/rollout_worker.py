"""Rollout worker: simulates environments, and nothing else (paper sec. 3.1).

A worker owns `num_envs_per_worker` envs split into `worker_num_splits` groups (`EnvSplit`).
Each split steps its envs together and then asks a policy's inference workers for the next
actions; while one split waits for actions the other is stepped (double-buffered sampling,
paper sec. 3.2). The worker holds no copy of the policy: observations go into the shared
trajectory slot and actions come back in the same slot; queues carry only indices.

Episode boundaries: when an env's episode ends (terminated or truncated; truncation is treated
as termination) the env is reset at once, the done flag is written for that step, and the
recurrent state of the next step is zeroed so the new episode starts fresh.

For the supervisor it records which slots it owns and a heartbeat in the `SamplerLedger`, and
stamps its requests with its generation, so that a replacement can take over cleanly.

Must not: import models or learning code, or block on anything but its inbox.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from queue import Empty

import numpy as np

from sampleforge.buffers.sampler_ledger import SamplerLedger
from sampleforge.buffers.trajectory_buffer import SharedTrajectoryBuffer
from sampleforge.comms.messages import (
    ActionsReady,
    EpisodesFinished,
    InferenceRequested,
    Pause,
    ResendRequests,
    Resume,
    SamplerReport,
    Stop,
    TrajectoryReady,
)
from sampleforge.comms.queues import receive, send_many
from sampleforge.components.env_split import EnvSplit, StepTargets
from sampleforge.envs.registry import EnvSpec

REPORT_EVERY_SEC = 1.0


@dataclass
class _Split:
    """One EnvSplit and where its current rollout is stored."""

    index: int
    envs: EnvSplit
    policy_id: int = 0
    slot: int = -1  # -1: waiting for a free slot
    step: int = 0
    waiting_for_actions: bool = False
    pending_actions: list[int] = field(default_factory=list)  # steps answered while paused
    resent_step: int = -1  # a step whose request was sent twice: not trained on
    # Step T of the last rollout (observations, recurrent state), kept while no slot is free.
    carried: tuple[dict[str, np.ndarray], np.ndarray] | None = None


class RolloutWorker:
    """Steps envs when their actions are ready; see the module docstring."""

    def __init__(self, *, worker_index: int, env_spec: EnvSpec, num_envs: int,
                 num_splits: int, buffers: dict[int, SharedTrajectoryBuffer], inbox,
                 inference_queues: dict, learner_queues: dict, free_slots: dict, report_queue,
                 ledger: SamplerLedger, seed: int | None, frameskip: int = 1,
                 env_error_policy: str = "restart", generation: int = 0):
        self.name = f"rollout_worker_{worker_index}"
        self.worker_index = worker_index
        self.generation = generation
        self.buffers = buffers
        self.inbox = inbox
        self.inference_queues = inference_queues
        self.learner_queues = learner_queues
        self.free_slots = free_slots
        self.report_queue = report_queue
        self.ledger = ledger
        self.frameskip = frameskip
        self.running = True
        self.paused = True  # until the runner says Resume
        per_split = num_envs // num_splits
        self.splits = [_Split(index=s, envs=EnvSplit(
            env_spec=env_spec, worker_index=worker_index, first_env_index=s * per_split,
            num_envs=per_split, seed=seed, error_policy=env_error_policy))
            for s in range(num_splits)]
        self._views = {pid: _NumpyViews(buf) for pid, buf in buffers.items()}
        self._episode_returns: list[float] = []
        self._episode_lengths: list[int] = []
        self._faults: list[str] = []
        self._frames_since_report = 0
        self._timings = {"env_step": 0.0, "wait": 0.0}
        self._last_report = time.monotonic()
        self._started = False

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Reset every env and ask for the first actions of every split."""
        for split in self.splits:
            views = self._views[split.policy_id]
            first_obs = {k: np.empty_like(v[0, 0]) for k, v in views.obs.items()}
            split.envs.reset_all(first_obs)
            split.carried = (first_obs, np.zeros_like(views.rnn_states[0, 0]))
            # Never block on the shared free-slot queue (see `poll`): a split without a slot
            # waits parked until one is free.
            if self._acquire_slot(split):
                self._request_actions(split)
        self._started = True

    def poll(self, timeout: float) -> None:
        """Handle what arrived in the inbox (waiting up to `timeout` s), then report if due."""
        self.ledger.beat(self.worker_index)
        if not self._started:
            self.start()
        parked = [s for s in self.splits if s.slot < 0]
        for split in parked:
            if self._acquire_slot(split):
                self._request_actions(split)
        wait = min(timeout, 0.01) if parked else timeout
        t0 = time.perf_counter()
        messages = receive(self.inbox, wait)
        self._timings["wait"] += time.perf_counter() - t0
        for msg in messages:
            self._handle(msg)
        self._maybe_report()

    def close(self) -> None:
        for split in self.splits:
            split.envs.close()

    # --- messages -------------------------------------------------------------------------------
    def _handle(self, msg) -> None:
        if isinstance(msg, ActionsReady):
            split = self.splits[msg.split]
            if self.paused:
                split.pending_actions.append(msg.step)
            else:
                self._on_actions_ready(split, msg.step)
        elif isinstance(msg, Pause):
            self.paused = True
            self._maybe_report(force=True)  # the runner's summary should see every episode
        elif isinstance(msg, Resume):
            self.paused = False
            for split in self.splits:
                pending, split.pending_actions = split.pending_actions, []
                for step in pending:
                    self._on_actions_ready(split, step)
        elif isinstance(msg, ResendRequests):
            self._resend_requests()
        elif isinstance(msg, Stop):
            self.running = False
        else:
            raise TypeError(f"{self.name}: unexpected message {msg!r}")

    def _on_actions_ready(self, split: _Split, step: int) -> None:
        if step != split.step or not split.waiting_for_actions:
            return  # a duplicate answer to a re-sent request: the first one was used
        split.waiting_for_actions = False
        self._step_envs(split)
        split.step += 1
        if split.step == self.buffers[split.policy_id].rollout:
            self._finish_rollout(split)
        if split.slot >= 0:
            self._request_actions(split)

    def _resend_requests(self) -> None:
        """An inference worker died with requests in hand: ask again for every waiting split.

        A request answered twice may have its actions overwritten after the env used them, so
        that step is marked invalid rather than trained on with the wrong log-probability.
        """
        for split in self.splits:
            if split.waiting_for_actions and not split.pending_actions:
                split.resent_step = split.step
                self._request_actions(split)

    # --- env stepping ---------------------------------------------------------------------------
    def _step_envs(self, split: _Split) -> None:
        views = self._views[split.policy_id]
        slot, t = split.slot, split.step
        targets = StepTargets(rewards=views.rewards[slot, t], dones=views.dones[slot, t],
                              valids=views.valids[slot, t], next_obs=views.obs_at(slot, t + 1))
        t0 = time.perf_counter()
        outcome = split.envs.step(views.actions[slot, t], targets)
        self._timings["env_step"] += time.perf_counter() - t0
        if split.resent_step == t:
            targets.valids[:] = 0.0
            split.resent_step = -1
        self._episode_returns += outcome.episode_returns
        self._episode_lengths += outcome.episode_lengths
        self._faults += outcome.faults
        # A new episode starts with a fresh recurrent state.
        views.rnn_states[slot, t + 1][targets.dones > 0] = 0.0
        self._frames_since_report += len(split.envs) * self.frameskip

    def _finish_rollout(self, split: _Split) -> None:
        buffer = self.buffers[split.policy_id]
        finished = split.slot
        split.step = 0
        if self._acquire_slot(split):
            buffer.carry_over(finished, split.slot)
        else:
            # Keep step T ourselves: once handed over, the slot may be reused at any time.
            views = self._views[split.policy_id]
            split.carried = ({k: v[finished, -1].copy() for k, v in views.obs.items()},
                             views.rnn_states[finished, -1].copy())
            split.slot = -1
        self.ledger.release(split.policy_id, finished)
        send_many(self.learner_queues[split.policy_id], [TrajectoryReady(
            split.policy_id, finished, len(split.envs), self.worker_index)])

    def _acquire_slot(self, split: _Split) -> bool:
        """Take a free slot if there is one now (never waits: a process killed while waiting
        on a shared queue could leave it unusable for everyone)."""
        try:
            split.slot = self.free_slots[split.policy_id].get(block=False)
        except Empty:
            split.slot = -1
            return False
        self.ledger.slot_owners[split.policy_id][split.slot] = self.worker_index
        if split.carried is not None:
            views = self._views[split.policy_id]
            observations, rnn_state = split.carried
            for key, value in observations.items():
                views.obs[key][split.slot, 0] = value
            views.rnn_states[split.slot, 0] = rnn_state
            split.carried = None
        return True

    def _request_actions(self, split: _Split) -> None:
        split.waiting_for_actions = True
        send_many(self.inference_queues[split.policy_id], [InferenceRequested(
            self.worker_index, split.index, split.slot, split.step, self.generation)])

    # --- reporting ------------------------------------------------------------------------------
    def _maybe_report(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_report < REPORT_EVERY_SEC:
            return
        reports = [SamplerReport(self.worker_index, self._frames_since_report,
                                 dict(self._timings), env_faults=self._faults)]
        if self._episode_returns:
            reports.append(EpisodesFinished(0, self._episode_returns, self._episode_lengths))
        send_many(self.report_queue, reports)
        self._episode_returns, self._episode_lengths, self._faults = [], [], []
        self._frames_since_report = 0
        self._timings = {k: 0.0 for k in self._timings}
        self._last_report = now


class _NumpyViews:
    """numpy views of a trajectory buffer's tensors: writing through them is writing to it."""

    def __init__(self, buffer: SharedTrajectoryBuffer):
        self.obs = {k: v.numpy() for k, v in buffer.obs.items()}
        self.actions = buffer.actions.numpy()
        self.rewards = buffer.rewards.numpy()
        self.dones = buffer.dones.numpy()
        self.valids = buffer.valids.numpy()
        self.rnn_states = buffer.rnn_states.numpy()

    def obs_at(self, slot: int, t: int) -> dict[str, np.ndarray]:
        return {k: v[slot, t] for k, v in self.obs.items()}
