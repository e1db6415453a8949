"""Rollout worker: simulates environments, and nothing else (paper sec. 3.1).

A worker owns `num_envs_per_worker` envs split into `worker_num_splits` groups (`EnvSplit`).
Each split steps its envs together and then asks a policy's inference workers for the next
actions; while one split waits for actions the other is stepped (double-buffered sampling,
paper sec. 3.2). The worker holds no copy of the policy: observations go into the shared
trajectory slot and actions come back in the same slot; queues carry only indices.

Episode boundaries are the env split's (`EnvSplit`, "Episode ends"): a terminated env is reset
at once with its done flag written for that step; a truncated one shows its final observation
first (no done flag, so the learner bootstraps from it) and is reset on its next step, which is
marked done and invalid. Wherever a done flag is written, the recurrent state of the next step
is zeroed so the new episode starts fresh.

Policies: each row (an agent seat of an env) is played by one policy, chosen by the
`PolicyMapping` when its env's episode starts. Each step the worker stamps the rows' policy ids
into the slot, asks each policy present for actions through that policy's queue and steps the
envs once all have answered. A finished rollout goes to the learner of every trained policy that
acted in it, with the rows it played; frozen opponents' rows go nowhere.

For the supervisor it records which slots it owns and a heartbeat in the `SamplerLedger`, and
stamps its requests with its generation, so that a replacement can take over cleanly. Given a
`cpu_core` (`worker_cpu_affinity`), it pins itself to that core as it starts
(`comms/cpu_affinity.py`).

Must not: import models or learning code, or block on anything but its inbox.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sampleforge.buffers.sampler_ledger import SamplerLedger
from sampleforge.buffers.slot_pool import SlotPool
from sampleforge.buffers.step_validity import Excluded, exclude
from sampleforge.buffers.trajectory_buffer import SharedTrajectoryBuffer
from sampleforge.comms.cpu_affinity import pin_to_core
from sampleforge.comms.messages import (
    ActionsReady,
    EpisodesFinished,
    InferenceRequested,
    Pause,
    Paused,
    ResendRequests,
    Resume,
    SamplerReport,
    SetRewardShaping,
    Stop,
    TrajectoryReady,
)
from sampleforge.comms.queues import receive, send_many
from sampleforge.envs.policy_mapping import PolicyMapping
from sampleforge.envs.registry import EnvSpec
from sampleforge.envs.stepping.env_split import EnvSplit, MultiAgentEnvSplit, StepTargets
from sampleforge.envs.stepping.factory import make_env_split
from sampleforge.envs.stepping.faults import DEFAULT_MAX_CONSECUTIVE_FAULTS, RateLimitedWarnings

REPORT_EVERY_SEC = 1.0


@dataclass
class _Split:
    """One EnvSplit, the policy of each of its rows, and where its current rollout is stored."""

    index: int
    envs: EnvSplit
    row_policy: np.ndarray  # [rows] int32
    slot: int = -1  # -1: waiting for a free slot
    step: int = 0
    awaiting: set[int] = field(default_factory=set)  # policies whose actions are outstanding
    pending_actions: list[ActionsReady] = field(default_factory=list)  # arrived while paused
    resent_step: int = -1  # a step whose request was sent twice: not trained on
    # Step T of the last rollout (observations, recurrent state), kept while no slot is free.
    carried: tuple[dict[str, np.ndarray], np.ndarray] | None = None
    parked_at: int = 0  # when it last parked (a ticket): parked splits get slots in this order


@dataclass(frozen=True)
class RolloutEndpoints:
    """What a rollout worker reads and writes; built by the wiring."""

    buffer: SharedTrajectoryBuffer
    inbox: Any  # actions ready and commands, of this worker's generation
    inference_queues: dict[int, Any]  # every acting policy's request queue
    learner_queues: dict[int, Any]  # every trained policy's learner inbox
    slots: SlotPool
    ledger: SamplerLedger  # heartbeats and generations
    report_queue: Any


class RolloutWorker:
    """Steps envs when their actions are ready; see the module docstring."""

    def __init__(
        self,
        *,
        worker_index: int,
        endpoints: RolloutEndpoints,
        env_spec: EnvSpec,
        num_envs: int,
        num_splits: int,
        seed: int | None,
        frameskip: int = 1,
        env_error_policy: str = "restart",
        max_consecutive_env_faults: int = DEFAULT_MAX_CONSECUTIVE_FAULTS,
        generation: int = 0,
        policy_mapping: PolicyMapping | None = None,
        reward_shaping: dict[int, dict[str, float]] | None = None,
        cpu_core: int | None = None,
    ):
        if cpu_core is not None:
            # First thing, before any env exists: what the envs start (helper processes, an
            # EnvPool's threads, sized from the cores it may use) stays on this core too.
            pin_to_core(cpu_core)
        self.name = f"rollout_worker_{worker_index}"
        self.worker_index = worker_index
        self.generation = generation
        self.buffer = endpoints.buffer
        self.inbox = endpoints.inbox
        self.inference_queues = endpoints.inference_queues
        self.learner_queues = endpoints.learner_queues  # trained policies only
        self.slots = endpoints.slots
        self.report_queue = endpoints.report_queue
        self.ledger = endpoints.ledger
        self.frameskip = frameskip
        self.running = True
        self.paused = True  # until the runner says Resume
        self.mapping = policy_mapping or PolicyMapping("random", num_policies=1)
        self.reward_shaping = dict(reward_shaping or {})
        self._one_policy = self.mapping.num_policies + self.mapping.num_frozen == 1
        self._rng = np.random.default_rng(None if seed is None else [seed, worker_index])
        per_split = num_envs // num_splits
        # One rate limit for the worker's fault warnings, whichever split they come from.
        fault_warnings = RateLimitedWarnings()
        self.splits = []
        for s in range(num_splits):
            envs = make_env_split(
                env_spec=env_spec,
                worker_index=worker_index,
                first_env_index=s * per_split,
                num_envs=per_split,
                seed=seed,
                error_policy=env_error_policy,
                max_consecutive_faults=max_consecutive_env_faults,
                fault_warnings=fault_warnings,
            )
            split = _Split(index=s, envs=envs, row_policy=np.zeros(envs.num_rows, dtype=np.int32))
            for i in range(len(envs)):
                self._assign_policies(split, i)
            self.splits.append(split)
        self._views = _NumpyViews(self.buffer)
        self._episodes: dict[int, EpisodesFinished] = {}
        self._faults: list[str] = []
        self._frames_since_report = 0
        self._timings = {"env_step": 0.0, "wait": 0.0}
        self._last_report = time.monotonic()
        self._started = False
        self._park_tickets = 0

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Reset every env and ask for the first actions of every split."""
        for split in self.splits:
            views = self._views
            first_obs = {k: np.empty_like(v[0, 0]) for k, v in views.obs.items()}
            split.envs.reset_all(first_obs)
            # Resets of many envs can take longer than the hang timeout: alive after each split.
            self.ledger.beat(self.worker_index)
            split.carried = (first_obs, np.zeros_like(views.rnn_states[0, 0]))
            # Never block on the shared free-slot queue (see `poll`): a split without a slot
            # waits parked until one is free.
            if self._acquire_slot(split):
                self._request_actions(split)
            else:
                self._park(split)
        self._started = True

    def poll(self, timeout: float) -> None:
        """Handle what arrived in the inbox (waiting up to `timeout` s), then report if due."""
        self.ledger.beat(self.worker_index)
        if not self._started:
            self.start()
        parked = self._parked()
        for split in parked:
            if not self._acquire_slot(split):
                break  # first come, first served: a later split gets no slot before it
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

    # --- exact resume (serial mode) -------------------------------------------------------------
    def snapshot_state(self) -> dict:
        """Everything this worker holds, envs included (pickled), for an exact resume."""
        return {
            "splits": pickle.dumps(self.splits),
            "rng": self._rng.bit_generator.state,
            "paused": self.paused,
            "started": self._started,
            "reward_shaping": dict(self.reward_shaping),
        }

    def restore_state(self, state: dict) -> None:
        self.close()
        self.splits = pickle.loads(state["splits"])
        self._park_tickets = max(s.parked_at for s in self.splits)
        self._rng.bit_generator.state = state["rng"]
        self.paused, self._started = state["paused"], state["started"]
        self.reward_shaping = state["reward_shaping"]

    # --- messages -------------------------------------------------------------------------------
    def _handle(self, msg) -> None:
        if isinstance(msg, ActionsReady):
            split = self.splits[msg.split]
            if self.paused:
                split.pending_actions.append(msg)
            else:
                self._on_actions_ready(split, msg)
        elif isinstance(msg, Pause):
            self.paused = True
            self._maybe_report(force=True)  # the runner's summary should see every episode
            send_many(self.report_queue, [Paused(self.worker_index)])
        elif isinstance(msg, Resume):
            self.paused = False
            for split in self.splits:
                pending, split.pending_actions = split.pending_actions, []
                for answer in pending:
                    self._on_actions_ready(split, answer)
        elif isinstance(msg, ResendRequests):
            self._resend_requests()
        elif isinstance(msg, SetRewardShaping):
            self.reward_shaping[msg.policy_id] = dict(msg.coefficients)
        elif isinstance(msg, Stop):
            self.running = False
        else:
            raise TypeError(f"{self.name}: unexpected message {msg!r}")

    def _on_actions_ready(self, split: _Split, answer: ActionsReady) -> None:
        if answer.step != split.step or answer.policy_id not in split.awaiting:
            return  # a duplicate answer to a re-sent request: the first one was used
        split.awaiting.discard(answer.policy_id)
        if split.awaiting:
            return  # other policies of this split have not answered yet
        self._step_envs(split)
        split.step += 1
        if split.step == self.buffer.rollout:
            self._finish_rollout(split)
        if split.slot >= 0:
            self._request_actions(split)

    def _resend_requests(self) -> None:
        """An inference worker died with requests in hand: ask again for every waiting split.

        A request answered twice may have its actions overwritten after the env used them, so
        that step is marked invalid rather than trained on with the wrong log-probability.
        """
        for split in self.splits:
            # Answers that came while paused wait in `pending_actions`; only the policies
            # without one are asked again (in a split played by several policies, some may
            # have answered).
            answered = {a.policy_id for a in split.pending_actions if a.step == split.step}
            missing = split.awaiting - answered
            if missing:
                split.resent_step = split.step
                self._send_requests(split, missing)

    # --- env stepping ---------------------------------------------------------------------------
    def _step_envs(self, split: _Split) -> None:
        views = self._views
        slot, t = split.slot, split.step
        targets = StepTargets(
            rewards=views.rewards[slot, t],
            dones=views.dones[slot, t],
            valids=views.valids[slot, t],
            next_obs=views.obs_at(slot, t + 1),
        )
        t0 = time.perf_counter()
        outcome = split.envs.step(views.actions[slot, t], targets)
        self._timings["env_step"] += time.perf_counter() - t0
        if split.resent_step == t:
            exclude(targets.valids, slice(None), Excluded.RESENT_ACTION)
            split.resent_step = -1
        for ret, length, row, win in zip(
            outcome.episode_returns,
            outcome.episode_lengths,
            outcome.episode_rows,
            outcome.episode_wins,
        ):
            self._record_episode(int(split.row_policy[row]), ret, length, win)
        self._faults += outcome.faults
        for i in set(outcome.ended_envs):
            self._assign_policies(split, i)
        # A new episode starts with a fresh recurrent state.
        views.rnn_states[slot, t + 1][targets.dones > 0] = 0.0
        self._frames_since_report += split.envs.num_rows * self.frameskip

    def _assign_policies(self, split: _Split, i: int) -> None:
        """A new episode of env `i` of the split: draw the policy of each of its seats."""
        if self._one_policy:
            return  # every row is policy 0's, as initialised
        envs = split.envs
        env_index = envs.contexts[i].env_index
        policies = self.mapping.assign(env_index, envs.seats, self._rng)
        split.row_policy[envs.env_rows(i)] = policies
        if self.reward_shaping and isinstance(envs, MultiAgentEnvSplit):  # multi-agent only
            for seat, policy in enumerate(policies.tolist()):
                if policy in self.reward_shaping:
                    envs.set_reward_shaping(i, seat, self.reward_shaping[policy])

    def _parked(self) -> list[_Split]:
        """The splits waiting for a slot, longest-waiting first."""
        return sorted((s for s in self.splits if s.slot < 0), key=lambda s: s.parked_at)

    def _finish_rollout(self, split: _Split) -> None:
        finished = split.slot
        split.step = 0
        # A split already waiting goes first. Under back-pressure only a slot or two may be on
        # their way; a finishing split that took the next one at once would starve its
        # parked siblings, and their envs would stand still for the rest of the run.
        if not self._parked() and self._acquire_slot(split):
            self.buffer.carry_over(finished, split.slot)
        else:
            # Keep step T ourselves: once handed over, the slot may be reused at any time.
            views = self._views
            split.carried = (
                {k: v[finished, -1].copy() for k, v in views.obs.items()},
                views.rnn_states[finished, -1].copy(),
            )
            self._park(split)
        self._hand_over(split, finished)

    def _park(self, split: _Split) -> None:
        """The split waits for a slot, behind those already waiting."""
        self._park_tickets += 1
        split.slot, split.parked_at = -1, self._park_tickets

    def _hand_over(self, split: _Split, slot: int) -> None:
        """Send the slot to the learner of each trained policy that acted in it."""
        acted = self._views.policy_ids[slot, :-1]  # [T, rows]
        rows_of = {p: np.flatnonzero((acted == p).any(axis=0)) for p in self.learner_queues}
        rows_of = {p: rows for p, rows in rows_of.items() if len(rows)}
        every_row = split.envs.num_rows
        returner = min(rows_of) if rows_of else -1
        messages = {
            p: TrajectoryReady(
                p,
                slot,
                None if len(rows) == every_row else tuple(rows.tolist()),
                self.worker_index,
                returns_slot=p == returner,
                split=split.index,
            )
            for p, rows in rows_of.items()
        }
        # Everything is prepared first: a kill between the ledger update and the sends would
        # lose the slot, so that stretch is kept as short as possible.
        # No reader: free again at once.
        self.slots.hand_over(slot, readers=list(rows_of), worker=self.worker_index)
        for p, message in messages.items():
            send_many(self.learner_queues[p], [message])

    def _acquire_slot(self, split: _Split) -> bool:
        """Take a free slot if the learners want more data and one is free now (never waits:
        a process killed while waiting on a shared queue could leave it unusable for
        everyone). A split without a slot stays parked; `poll` retries."""
        slot = self.slots.acquire(self.worker_index)  # None: back-pressure, or none free
        if slot is None:
            return False
        split.slot = slot
        if split.carried is not None:
            views = self._views
            observations, rnn_state = split.carried
            for key, value in observations.items():
                views.obs[key][split.slot, 0] = value
            views.rnn_states[split.slot, 0] = rnn_state
            split.carried = None
        return True

    def _request_actions(self, split: _Split) -> None:
        self._views.policy_ids[split.slot, split.step] = split.row_policy
        if self._one_policy:
            policies = {0}  # skips np.unique on the hot path of the common case
        else:
            policies = set(np.unique(split.row_policy).tolist())
        split.awaiting = policies
        self._send_requests(split, policies)

    def _send_requests(self, split: _Split, policies: set[int]) -> None:
        request = InferenceRequested(
            self.worker_index, split.index, split.slot, split.step, self.generation
        )
        for p in policies:
            send_many(self.inference_queues[p], [request])

    # --- reporting ------------------------------------------------------------------------------
    def _has_news(self) -> bool:
        return bool(self._frames_since_report or self._episodes or self._faults)

    def _record_episode(self, policy: int, ret: float, length: int, win: float | None) -> None:
        record = self._episodes.get(policy)
        if record is None:
            record = self._episodes[policy] = EpisodesFinished(policy, [], [], [])
        record.returns.append(ret)
        record.lengths.append(length)
        if win is not None:
            record.wins.append(float(win))

    def _maybe_report(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_report < REPORT_EVERY_SEC:
            return
        if self.paused and not force and not self._has_news():
            # Between `train` calls nobody reads the report queue: a report a second would
            # fill it (and fail this worker) in an outside driver's long pause.
            return
        reports: list[SamplerReport | EpisodesFinished] = [
            SamplerReport(
                self.worker_index,
                self._frames_since_report,
                dict(self._timings),
                env_faults=self._faults,
            )
        ]
        reports += list(self._episodes.values())
        send_many(self.report_queue, reports)
        self._episodes = {}
        self._faults = []
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
        self.policy_ids = buffer.policy_ids.numpy()

    def obs_at(self, slot: int, t: int) -> dict[str, np.ndarray]:
        return {k: v[slot, t] for k, v in self.obs.items()}
