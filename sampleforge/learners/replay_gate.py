"""ReplayRatioGate: back-pressure on sampling that holds a replay's samples-per-insert ratio.

Responsible for: telling rollout workers how many trajectory slots may be on their way to a
value-based learner (`SamplerLedger.set_sampling_slots`), so that the transitions inserted
never run ahead of what the replay's rate limiter allows (`buffers/rate_limiter.py`): a slow
learner slows sampling down instead of letting the replay ratio fall, and a slow sampler leaves
the learner waiting instead of letting the ratio rise. It also measures that wait.

The slots allowed are the limiter's insert allowance in whole slots, rounded up so that at
least one slot is always allowed while any insert is: the limiter's error buffer absorbs the
overshoot of one slot.

Must not: touch the replay, the queues or the model.
"""

from __future__ import annotations

import time
from typing import Callable

from sampleforge.buffers.rate_limiter import SampleToInsertRatio
from sampleforge.buffers.sampler_ledger import SamplerLedger


class ReplayRatioGate:
    """One value-based learner's side of the back-pressure (see the module docstring)."""

    def __init__(
        self,
        ledger: SamplerLedger,
        policy_id: int,
        limiter: SampleToInsertRatio,
        transitions_per_slot: int,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.ledger, self.policy_id = ledger, policy_id
        self.limiter = limiter
        self.transitions_per_slot = transitions_per_slot
        self.clock = clock
        self.waited_seconds = 0.0
        self._idle_since: float | None = None

    @property
    def lead(self) -> int:
        """Slots the limiter allows beyond those on their way (reported)."""
        return self._slots_allowed()

    @property
    def lead_at_cap(self) -> bool:
        """Whether sampling is held back by the ratio now (reported)."""
        return self.limiter.inserts_allowed() < 1

    def set_sgd_steps_per_dataset(self, steps: int) -> None:
        pass  # the ratio, not a dataset, decides

    def training_started(self, filled: int) -> None:
        if self._idle_since is not None:
            self.waited_seconds += self.clock() - self._idle_since
            self._idle_since = None

    def sgd_step_done(self) -> None:
        pass

    def training_done(self) -> None:
        self._idle_since = self.clock()

    def set_rows_per_slot(self, rows: float) -> None:
        """Unused: the replay ratio counts the steps inserted, whoever's rows they are."""

    def interrupted(self) -> None:
        """A pause or a command: not time spent waiting for data."""
        self._idle_since = None

    def update(self, staged_trajectories: int) -> int:
        """Write, and return, the slots that may be on their way now."""
        slots = self._slots_allowed()
        self.ledger.set_sampling_slots(self.policy_id, slots)
        return slots

    def _slots_allowed(self) -> int:
        inserts = self.limiter.inserts_allowed()
        return -(-inserts // self.transitions_per_slot)
