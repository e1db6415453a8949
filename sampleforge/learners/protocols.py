"""What the learner worker needs of an algorithm: three roles, each a protocol.

Responsible for: naming the interface between the process shell (`components/learner_worker.py`)
and a learner family (`learners/<family>.py`), so that the shell runs any algorithm the
registry names (`learners/registry.py`) without knowing which.

- `Trains` holds the model, the optimizer and the counters, and trains on what the stager
  hands it, publishing after every SGD step through a callback.
- `StagesData` takes finished trajectory slots as they arrive (copies them into datasets for
  an on-policy learner, into a replay for a value-based one), gives the slots back, and says
  when there is something to train on.
- `GatesSampling` decides how many trajectory slots rollout workers may fill for this learner
  (back-pressure): the policy-lag bound of an on-policy learner, the replay ratio of an
  off-policy one.

Must not: hold logic; these are only the shapes the shell relies on.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import torch
from torch import nn

from sampleforge.comms.messages import TrajectoryReady
from sampleforge.learners.optimization import DataParallel


class Trains(Protocol):
    """A policy's training state and its update rule."""

    @property
    def model(self) -> nn.Module: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def env_steps(self) -> int:
        """Env steps trained or staged (in a data-parallel run, every rank's)."""
        ...

    @env_steps.setter
    def env_steps(self, value: int) -> None: ...

    # The other ranks' learners of this policy in a data-parallel run (None: this one alone);
    # the learner averages its gradients through it between backward and clipping.
    data_parallel: DataParallel | None

    @property
    def policy_version(self) -> int: ...

    @property
    def sgd_steps_per_dataset(self) -> int:
        """SGD steps one `train` call makes (what the gate plans with)."""
        ...

    def train(self, data: Any, on_sgd_step: Callable[[], None]) -> dict[str, float]:
        """Train on what the stager's `take` returned; call `on_sgd_step` after every optimizer
        step (the new weights are published then). Returns statistics to report."""
        ...

    def set_hyperparameters(self, values: dict[str, float]) -> None: ...

    def copy_policy(self, model: nn.Module) -> None:
        """Continue from `model`'s weights (PBT replacement): new optimizer state."""
        ...

    def weights_replaced(self) -> None:
        """The model's weights were set from outside (the Python API)."""
        ...

    def assert_finite(self) -> None:
        """Raise unless every parameter and optimizer statistic is finite (before a save)."""
        ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class StagesData(Protocol):
    """Where arrived trajectories wait until the learner trains on them."""

    @property
    def filled(self) -> int:
        """Trajectories staged and not yet trained on (what the gate counts)."""
        ...

    @property
    def dataset_trajectories(self) -> int:
        """Trajectories one `take` needs."""
        ...

    def has_room(self) -> bool:
        """Whether `add` may take another trajectory now (the rest wait in the inbox)."""
        ...

    def add(self, msg: TrajectoryReady) -> None: ...

    def drop(self, slot: int, returns_slot: bool) -> None:
        """Let `slot` go without staging it (its message was lost: `HandOverCheck`)."""
        ...

    def return_slots(self) -> None:
        """Give copied slots back to the rollout workers."""
        ...

    def ready(self) -> bool:
        """Whether `take` has something to train on now."""
        ...

    @property
    def ready_items(self) -> int:
        """How much `take` would hand over now: datasets (0 or 1) or replay batches."""
        ...

    def take(self, limit: int | None = None) -> Any:
        """What the learner trains on next, at most `limit` items where items are batches
        (stays staged until `consume`)."""
        ...

    def consume(self) -> None:
        """The last `take` was trained on: let it go."""
        ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    def close(self) -> None:
        """Release what it holds (threads, memory)."""
        ...

    def lasting_state(self) -> dict | None:
        """What of its state outlives the run's processes (a replay), for checkpoints with
        --save_replay; None: nothing worth keeping (slots and staged rows are not)."""
        ...

    def load_lasting_state(self, state: dict) -> None:
        """Raises `buffers.replay.ReplaySettingsChanged`, having loaded nothing, where the
        state was saved under other settings."""
        ...

    def unsaved_state_note(self) -> str | None:
        """What resuming from a checkpoint without this stager's state means, for the log
        (None: nothing that matters)."""
        ...


class GatesSampling(Protocol):
    """Back-pressure: how many slots rollout workers may fill for this learner."""

    @property
    def lead(self) -> int:
        """SGD steps ahead of need that sampling may run (reported)."""
        ...

    @property
    def lead_at_cap(self) -> bool:
        """Whether the lead is as long as it may be (reported)."""
        ...

    @property
    def waited_seconds(self) -> float:
        """The learner's time spent waiting for data, summed over the run (reported)."""
        ...

    def set_sgd_steps_per_dataset(self, steps: int) -> None: ...

    def training_started(self, filled: int) -> None: ...

    def sgd_step_done(self) -> None: ...

    def training_done(self) -> None: ...

    def set_rows_per_slot(self, rows: float) -> None:
        """The finished slots have brought `rows` of this policy's trajectories each, on
        average."""
        ...

    def interrupted(self) -> None:
        """Time that is not the learner waiting for data passes, or will (a pause, a
        checkpoint, new weights): the wait before the next dataset is not counted or judged."""
        ...

    def update(self, staged_trajectories: int) -> int:
        """Write, and return, the number of slots that may be on their way now."""
        ...
