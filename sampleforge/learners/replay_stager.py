"""ReplayStager: how a value-based learner stages arrived trajectories, into its replay.

Responsible for: copying the rows its policy played from each finished trajectory slot into
the policy's replay (`buffers/replay.py`, behind a `BackgroundSampler` that draws batches on a
thread of its own), giving the slot back at once, and handing the learner the batches the
sampler has ready. Rewards are scaled and clipped as they go in (`reward_scale`,
`reward_clip`), so the replay holds what the loss learns from.

Each env row of the sampler is one stream of the replay: (worker, split, row) names the same
env from one rollout to the next. A stream begins afresh where its first observation is not
the last one stored (the first rollout, or an env of a replaced rollout worker).

Policy lag: the versions that acted in a trajectory, against the learner's version when it is
inserted (samples are reused long after, so that is the lag that says how fresh the data is).

Must not: compute losses or priorities, or hold the ratio of updates to inserts (the sampler's
rate limiter does; `replay_gate.py` turns it into back-pressure on sampling).
"""

from __future__ import annotations

import numpy as np
import torch

from sampleforge.buffers.rate_limiter import SampleToInsertRatio
from sampleforge.buffers.replay import ReplayBatch, ReplayBuffer
from sampleforge.buffers.replay_sampler import BackgroundSampler
from sampleforge.buffers.slot_pool import SlotPool
from sampleforge.buffers.step_validity import trainable
from sampleforge.buffers.trajectory_buffer import SharedTrajectoryBuffer
from sampleforge.comms.messages import TrajectoryReady


class ReplayStager:
    """Feeds a policy's replay from finished slots; see the module docstring."""

    def __init__(
        self,
        buffer: SharedTrajectoryBuffer,
        slots: SlotPool,
        sampler: BackgroundSampler,
        *,
        policy_id: int,
        splits_per_worker: int,
        reward_scale: float,
        reward_clip: float | None,
        batches_per_take: int,
    ):
        self.buffer, self.slots, self.sampler = buffer, slots, sampler
        self.policy_id = policy_id
        self.splits_per_worker = splits_per_worker
        self.reward_scale, self.reward_clip = reward_scale, reward_clip
        self.batches_per_take = batches_per_take
        self.inserted_steps = 0  # this policy's valid transitions inserted, over the run
        self._to_return: list[int] = []
        self._taken: list[ReplayBatch] = []
        self._lags: list[np.ndarray] = []
        self._last_lags = np.zeros(1)
        self.current_version = 0  # the learner's, for the lag of what arrives

    @property
    def replay(self) -> ReplayBuffer:
        return self.sampler.replay

    @property
    def limiter(self) -> SampleToInsertRatio:
        return self.sampler.limiter

    # --- StagesData -----------------------------------------------------------------------------
    @property
    def filled(self) -> int:
        """Batches ready to train on."""
        return self.sampler.num_ready

    @property
    def dataset_trajectories(self) -> int:
        return 1

    def has_room(self) -> bool:
        """Arrived trajectories go in at once: the gate already bounds what is sampled."""
        return True

    def add(self, msg: TrajectoryReady) -> None:
        """Insert this policy's rows of a finished slot and release the slot."""
        slot = msg.slot
        rows = (
            torch.arange(self.buffer.layout.rows_per_slot)
            if msg.rows is None
            else torch.tensor(msg.rows, dtype=torch.long)
        )
        obs = {k: v[slot].index_select(1, rows).numpy() for k, v in self.buffer.obs.items()}
        policy_ids = self.buffer.policy_ids[slot, :-1].index_select(1, rows)
        recorded = self.buffer.valids[slot, :-1].index_select(1, rows)
        valids = trainable(recorded, policy_ids, self.policy_id).numpy()
        actions = self.buffer.actions[slot, :-1].index_select(1, rows).numpy()
        rewards = self._rewards(self.buffer.rewards[slot, :-1].index_select(1, rows).numpy())
        dones = self.buffer.dones[slot, :-1].index_select(1, rows).numpy()
        versions = self.buffer.policy_versions[slot, :-1].index_select(1, rows).numpy()
        self.drop(slot, msg.returns_slot)  # copied: the slot may go
        first = (msg.worker * self.splits_per_worker + msg.split) * self.buffer.layout.rows_per_slot
        streams = first + rows.numpy()
        starts = np.array(
            [
                not self.replay.continues(int(s), {k: v[0, j] for k, v in obs.items()})
                for j, s in enumerate(streams)
            ]
        )
        self.sampler.insert(streams, obs, actions, rewards, dones, valids, starts=starts)
        own = valids > 0
        self.inserted_steps += int(own.sum())
        if own.any():
            self._lags.append(self.current_version - versions[own])

    def _rewards(self, rewards: np.ndarray) -> np.ndarray:
        rewards = rewards * self.reward_scale
        if self.reward_clip is not None:
            rewards = np.clip(rewards, -self.reward_clip, self.reward_clip)
        return rewards.astype(np.float32)

    def drop(self, slot: int, returns_slot: bool) -> None:
        """Done with `slot` without inserting (more) from it."""
        self._to_return = self.slots.done_with(slot, self.policy_id, returns_slot, self._to_return)

    def return_slots(self) -> None:
        if self._to_return:
            self._to_return = self.slots.release_copied(self._to_return)

    def ready(self) -> bool:
        return self.sampler.num_ready > 0

    @property
    def ready_items(self) -> int:
        """Batches `take` would hand over now."""
        return min(self.sampler.num_ready, self.batches_per_take)

    def take(self, limit: int | None = None) -> list[ReplayBatch]:
        """The batches ready now (at least one: `ready()` said so), at most
        `batches_per_take` and `limit` (data-parallel ranks take as many as each other)."""
        if not self._taken:
            most = self.batches_per_take if limit is None else min(limit, self.batches_per_take)
            self._taken = self.sampler.take_ready(most)
        return self._taken

    def consume(self) -> None:
        self._taken = []

    def close(self) -> None:
        self.sampler.close()

    def unsaved_state_note(self) -> str | None:
        return (
            f"the replay refills with {self.limiter.min_size_to_sample} transitions before "
            "training resumes"
        )

    def take_lags(self) -> np.ndarray:
        """The policy lags of the transitions inserted since the last call (those of the call
        before when nothing arrived since; zeros before anything arrived)."""
        if self._lags:
            self._last_lags = np.concatenate(self._lags)
            self._lags = []
        return self._last_lags

    def report(self, replay_size: int) -> dict[str, float]:
        """The policy lags since the last report and the replay's statistics, for telemetry
        (`replay_size`: its capacity, by which bytes per transition are counted once full)."""
        lags = self.take_lags()
        return {
            "policy_lag/min": float(lags.min()),
            "policy_lag/mean": float(lags.mean()),
            "policy_lag/max": float(lags.max()),
            "replay/size": float(self.replay.num_sampleable),
            "replay/samples_per_insert": float(self.limiter.observed_samples_per_insert),
            "replay/bytes_per_transition": self.replay.nbytes()
            / max(1, min(self.inserted_steps, replay_size)),
        }

    # --- state ----------------------------------------------------------------------------------
    def lasting_state(self) -> dict:
        """The replay and its limiter (`--save_replay` puts them in checkpoints)."""
        return {"replay": self.replay.state_dict(), "limiter": self.limiter.state_dict()}

    def load_lasting_state(self, state: dict) -> None:
        self.sampler.load_state_dict(state["replay"], state["limiter"])

    def state_dict(self) -> dict:
        """Everything, the sampler's random stream and drawn batches and the slots to give
        back included (an exact resume in serial mode)."""
        return {
            **self.lasting_state(),
            "sampler": self.sampler.state_dict(),
            "to_return": list(self._to_return),
        }

    def load_state_dict(self, state: dict) -> None:
        self.load_lasting_state(state)
        self.sampler.load_extra_state(state["sampler"])
        self._to_return = list(state["to_return"])
