"""Preallocated shared-memory storage for trajectories, and which component owns which slot.

One `SharedTrajectoryBuffer` serves every policy of a run. It holds `num_slots` slots; a slot
is the rollout of one split of one rollout worker: tensors shaped `[num_slots, T + 1, rows, ...]`,
where `rows` is the number of env-agents of a split (envs x agent seats) and index T holds the
observation (and recurrent state) the next rollout starts from, which the learner needs to
bootstrap values. `policy_ids` says which policy acted for each row at each step.

The same memory is the channel between components (paper sec. 3.3): a rollout worker writes
observations at step t, an inference worker reads them and writes actions, log-probs, values and
the next recurrent state in place, and the learner later copies whole slots out. Queues carry
only slot indices. Slots circulate through a free-slot queue: a rollout worker takes one, fills
it, hands it to the learners of the policies that acted in it, and the last of them to copy its
rows returns it (`SamplerLedger.reader_done`).

Freshly allocated memory is filled with poison (NaN, -1, 255) so that data nobody wrote stands
out. This module knows nothing about RL or processes beyond tensor layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from sampleforge.spaces import TensorSpec

# Per-step float fields written by the rollout worker (rewards, dones) or inference (the rest).
_STEP_FLOAT_FIELDS = ("rewards", "dones", "valids", "log_probs", "values")


@dataclass(frozen=True)
class TrajectoryLayout:
    """Shapes of a run's trajectory buffer."""

    obs_specs: dict[str, TensorSpec]
    action_spec: TensorSpec
    rnn_state_size: int
    rollout: int
    rows_per_slot: int
    num_slots: int
    # Observation keys whose first axis stacks the env's last frames (a replay stores each
    # frame once: replay_layout.frame_stacks_of).
    frame_stacked_keys: tuple[str, ...] = ()

    def nbytes(self) -> int:
        """Bytes of shared memory the buffer occupies."""
        steps = self.num_slots * (self.rollout + 1) * self.rows_per_slot
        per_step = sum(_spec_bytes(s) for s in self.obs_specs.values())
        per_step += _spec_bytes(self.action_spec)
        per_step += 4 * self.rnn_state_size + 4 * len(_STEP_FLOAT_FIELDS) + 8 + 4
        return steps * per_step

    def step_bytes(self) -> int:
        """Bytes of one step of one row (a staged copy of a step takes as many)."""
        return self.nbytes() // (self.num_slots * (self.rollout + 1) * self.rows_per_slot)


def _spec_bytes(spec: TensorSpec) -> int:
    return math.prod(spec.shape) * torch.empty((), dtype=spec.dtype).element_size()


def slots_needed(total_splits: int, rows_per_slot: int, rollout: int, dataset_size: int) -> int:
    """Enough slots that no rollout worker waits while the learner keeps up.

    Each split needs one slot being filled and one waiting to be copied, and the learner may
    hold back a dataset's worth of slots while it trains.
    """
    trajectories_per_dataset = max(1, dataset_size // rollout)
    return 2 * total_splits + 2 * math.ceil(trajectories_per_dataset / rows_per_slot)


class SharedTrajectoryBuffer:
    """The shared tensors of the trajectory slots (see module docstring)."""

    def __init__(self, layout: TrajectoryLayout):
        # Always host memory: envs produce observations on the CPU and rollout workers write
        # them through numpy views; inference and learner move what they read to their device.
        self.layout = layout
        lead = (layout.num_slots, layout.rollout + 1, layout.rows_per_slot)
        self.obs = {
            key: _shared(lead + spec.shape, spec.dtype) for key, spec in layout.obs_specs.items()
        }
        self.actions = _shared(lead + layout.action_spec.shape, layout.action_spec.dtype)
        self.rnn_states = _shared(lead + (layout.rnn_state_size,), torch.float32)
        self.rewards = _shared(lead, torch.float32)
        self.dones = _shared(lead, torch.float32)
        # 1 for a transition to learn from, 0 for one an env fault spoiled (never trained on).
        self.valids = _shared(lead, torch.float32)
        self.log_probs = _shared(lead, torch.float32)
        self.values = _shared(lead, torch.float32)
        self.policy_versions = _shared(lead, torch.int64)
        # The policy acting for each row at each step. Rows change policy only where an
        # episode starts, and each learner trains only on the steps of its own policy.
        self.policy_ids = _shared(lead, torch.int32)

    @property
    def rollout(self) -> int:
        return self.layout.rollout

    def fields(self) -> dict[str, torch.Tensor]:
        """Every tensor, observations as `obs.<key>`."""
        out = {f"obs.{k}": v for k, v in self.obs.items()}
        out.update(
            actions=self.actions,
            rnn_states=self.rnn_states,
            rewards=self.rewards,
            dones=self.dones,
            valids=self.valids,
            log_probs=self.log_probs,
            values=self.values,
            policy_versions=self.policy_versions,
            policy_ids=self.policy_ids,
        )
        return out

    def carry_over(self, from_slot: int, to_slot: int) -> None:
        """Start a new slot where the previous rollout ended: step T becomes step 0."""
        T = self.rollout
        for tensor in self.obs.values():
            tensor[to_slot, 0].copy_(tensor[from_slot, T])
        self.rnn_states[to_slot, 0].copy_(self.rnn_states[from_slot, T])


def _shared(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    tensor = torch.empty(shape, dtype=dtype).share_memory_()
    _poison(tensor)
    return tensor


def _poison(tensor: torch.Tensor) -> None:
    if tensor.dtype.is_floating_point:
        tensor.fill_(float("nan"))
    elif tensor.dtype == torch.uint8:
        tensor.fill_(255)
    else:
        tensor.fill_(-1)
