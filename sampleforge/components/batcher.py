"""Batcher: turns finished trajectory slots into contiguous, time-major datasets for a learner.

Rollouts finish asynchronously in many slots. The batcher copies each finished slot's rows into
a staging tensor on the learner's device (`[T + 1, trajectories, ...]`, time-major as the loss
functions want it) and gives the slot back to the free list at once, so rollout workers are
never held up by training. When the staging area holds a dataset's worth of trajectories the
learner takes it; rows beyond that wait for the next dataset.

Must not: compute anything about RL; it only moves data.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sampleforge.buffers.trajectory_buffer import SharedTrajectoryBuffer
from sampleforge.comms.messages import TrajectoryReady
from sampleforge.comms.queues import send_many


@dataclass
class Dataset:
    """Time-major training data: every tensor is `[T + 1, B, ...]` (row T: bootstrap step)."""

    obs: dict[str, torch.Tensor]
    actions: torch.Tensor
    rnn_states: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    valids: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    policy_versions: torch.Tensor

    @property
    def num_trajectories(self) -> int:
        return self.rewards.shape[1]

    def select(self, index: torch.Tensor) -> "Dataset":
        """The trajectories at `index` (a minibatch)."""
        return Dataset(obs={k: v[:, index] for k, v in self.obs.items()},
                       **{name: getattr(self, name)[:, index] for name in _PLAIN_FIELDS})


_PLAIN_FIELDS = ("actions", "rnn_states", "rewards", "dones", "valids", "log_probs", "values",
                 "policy_versions")


class Batcher:
    """Copies finished slots into a device-side staging area; see the module docstring."""

    def __init__(self, buffer: SharedTrajectoryBuffer, free_slots, dataset_trajectories: int,
                 device: torch.device):
        self.buffer = buffer
        self.free_slots = free_slots
        self.dataset_trajectories = dataset_trajectories
        capacity = dataset_trajectories + buffer.layout.rows_per_slot
        self._staging = {name: self._staging_like(tensor, capacity, device)
                         for name, tensor in buffer.fields().items()}
        self.filled = 0

    @staticmethod
    def _staging_like(tensor: torch.Tensor, capacity: int, device: torch.device) -> torch.Tensor:
        _, steps, _, *rest = tensor.shape
        return torch.empty((steps, capacity, *rest), dtype=tensor.dtype, device=device)

    def add(self, msg: TrajectoryReady) -> None:
        """Copy a finished slot in and hand the slot back to the rollout workers."""
        n = msg.num_rows
        end = self.filled + n
        for name, tensor in self.buffer.fields().items():
            self._staging[name][:, self.filled:end].copy_(tensor[msg.slot, :, :n],
                                                         non_blocking=True)
        self.filled = end
        send_many(self.free_slots, [msg.slot])

    def ready(self) -> bool:
        return self.filled >= self.dataset_trajectories

    def take(self) -> Dataset:
        """The oldest complete dataset. Valid until `consume()` is called."""
        d = self.dataset_trajectories
        view = {name: tensor[:, :d] for name, tensor in self._staging.items()}
        obs = {name.removeprefix("obs."): t for name, t in view.items() if name.startswith("obs.")}
        return Dataset(obs=obs, **{name: view[name] for name in _PLAIN_FIELDS})

    def consume(self) -> None:
        """Drop the dataset returned by `take`, keeping any rows that arrived beyond it."""
        d, extra = self.dataset_trajectories, self.filled - self.dataset_trajectories
        if extra > 0:
            for tensor in self._staging.values():
                tensor[:, :extra] = tensor[:, d:d + extra].clone()
        self.filled = max(extra, 0)
