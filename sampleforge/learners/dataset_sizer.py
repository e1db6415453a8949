"""Dataset size from the learner's measured speed: datasets grow while the run is lag-bound.

Responsible for: deciding, after every dataset an on-policy learner trains on, whether its
datasets should double (`--max_batch_size`). The sampling gate bounds the policy lag in SGD
steps (`sampling_gate.py`); with a fast learner (a GPU) the trajectories that bound lets sample
at once take longer to sample than the learner takes to train on them, so the learner waits
and the rollout workers wait for the gate. The paper's remedy is more samples per SGD step:
the minibatches grow with the dataset while their number stays, so the lag in SGD steps does
not change, and each SGD step carries more samples.

The rule, over a window of `WINDOW` datasets: when the gate held the lead at its cap for every
one of them and the learner still spent more than `GROW_WAIT_SHARE` of its time waiting for
data, the dataset doubles (up to the largest one the staging areas were allocated for). It
never shrinks: a dataset grows only where the sampler, not the learner, set the pace, and a
smaller one would set it again.

Must not: read the batcher or the gate (the learner worker passes the numbers); it only tells
them a new size, between datasets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# Datasets a decision looks back over: enough that one slow rollout does not decide it.
WINDOW = 8
# The learner's share of time spent waiting for data above which its datasets grow.
GROW_WAIT_SHARE = 0.2


class SizedByTrajectories(Protocol):
    """What plans with the dataset size: the batcher and the sampling gate."""

    def set_dataset_trajectories(self, trajectories: int) -> None: ...


@dataclass
class DatasetSizer:
    """Trajectories per dataset, between `smallest` (the configured size) and `largest`;
    `followers` are told each new size."""

    smallest: int
    largest: int
    followers: Sequence[SizedByTrajectories] = ()
    trajectories: int = 0
    # The window so far: datasets noted, seconds busy and waiting, whether all were at the cap.
    _noted: int = 0
    _busy: float = 0.0
    _waited: float = 0.0
    _at_cap: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.smallest <= self.largest:
            raise ValueError(f"dataset sizes must satisfy 0 < {self.smallest} <= {self.largest}")
        self.trajectories = self.trajectories or self.smallest

    def dataset_trained(self, busy_seconds: float, waited_seconds: float, lead_at_cap: bool) -> int:
        """Note one dataset: the learner's time training on it, its wait for it, and whether the
        lead was at its cap as training ended. Returns the size of the datasets to come."""
        self._noted += 1
        self._busy += busy_seconds
        self._waited += waited_seconds
        self._at_cap &= lead_at_cap
        if self._noted < WINDOW:
            return self.trajectories
        waited, busy = self._waited, self._busy
        lag_bound = self._at_cap and waited > GROW_WAIT_SHARE * (waited + busy)
        self._noted, self._busy, self._waited, self._at_cap = 0, 0.0, 0.0, True
        if lag_bound and self.trajectories < self.largest:
            self._resize(min(2 * self.trajectories, self.largest))
        return self.trajectories

    def state_dict(self) -> dict[str, int]:
        """The size grown to, part of a checkpoint: a resumed run goes on at it rather than
        regrowing from the configured size."""
        return {"trajectories": self.trajectories}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Go on at a saved size, within this run's bounds (its `max_batch_size` may differ)."""
        self._resize(min(max(state["trajectories"], self.smallest), self.largest))

    def _resize(self, trajectories: int) -> None:
        if trajectories != self.trajectories:
            self.trajectories = trajectories
            for follower in self.followers:
                follower.set_dataset_trajectories(trajectories)
