"""Back-pressure on sampling: how many trajectory slots a learner lets be on their way to it.

Responsible for: deciding, after every SGD step and whenever the learner is idle, how many
slots rollout workers may fill for this learner, and writing that to the ledger
(`SamplerLedger.set_sampling_slots`). This is what bounds policy lag when the learner is the
slow part (the paper bounds it with the number of trajectory buffers, sec. 3.4).

The rule: none while the learner has more than `lead` SGD steps to go before it needs a
dataset; then enough slots to complete every dataset it will start within `lead` steps. A lead
below the SGD steps per dataset opens sampling near the end of the current dataset; a longer
one lets the sampling of the datasets after it overlap (needed when one rollout takes longer
than training a dataset, as with short datasets and fast learners). Mean policy lag is then
about (SGD steps per dataset + lead) / 2.

With `lead = None` the gate finds the lead by feedback, so the learner neither waits for data
nor lets data wait: after a dataset on which the learner waited for the next one, the lead
grows by the SGD steps it could have made meanwhile; when the next dataset was sampled two or
more steps before the learner needed it, the lead shrinks by one, and when whole datasets
were found waiting as training started, by a dataset's steps each. Feedback rather than a
model of sampling speed, because on a small machine sampling slows down while the learner
trains and speeds up while it waits. A measured lead never exceeds what the trajectory slots
can hold, nor `measured_lead_bound`: what would take the mean lag past `MEAN_LAG_TARGET` (or
the learner's own target, `lag_target_datasets` of its datasets, where that is larger), or past
1.25 times the lag a dataset's own epochs make where that is larger. Where the learner is the
slow part, that costs some speed (set the lead explicitly to trade lag for speed).

Must not: touch the batcher, the queues or the model (the learner worker feeds it numbers).
"""

from __future__ import annotations

import math
import time
from typing import Callable

from sampleforge.buffers.sampler_ledger import SamplerLedger

# The lead to start from when it is measured.
_FIRST_LEAD = 1
# A measured lead stops where the mean policy lag, about (steps per dataset + lead) / 2, would
# pass the paper's 5-10 SGD steps: beyond, a learner-bound run buys speed with staleness.
# Where a dataset's own epochs already make more lag than that (PPO's 10 epochs of 32
# minibatches on MuJoCo: 320 SGD steps), the lead may add a quarter to it, so that sampling
# still overlaps learning.
MEAN_LAG_TARGET = 10
# Weight of the newest SGD step time in its running mean.
_SMOOTHING = 0.25


class SamplingGate:
    """One learner's side of the back-pressure (see the module docstring)."""

    def __init__(
        self,
        ledger: SamplerLedger,
        policy_id: int,
        dataset_trajectories: int,
        rows_per_slot: int,
        sgd_steps_per_dataset: int,
        lead_sgd_steps: int | None,
        clock: Callable[[], float] = time.monotonic,
        lag_target_datasets: float = 0.0,
    ):
        """`rows_per_slot`: a slot's rows, all of which are this policy's until the learner
        worker says otherwise (`set_rows_per_slot`); `lag_target_datasets`: the mean lag a
        measured lead may reach, in the learner's datasets (SGD steps per dataset x this),
        where that exceeds MEAN_LAG_TARGET."""
        self.ledger = ledger
        self.lag_target_datasets = lag_target_datasets
        self.policy_id = policy_id
        self.dataset_trajectories = dataset_trajectories
        self.rows_per_slot: float = rows_per_slot  # of this policy's, on average
        self.sgd_steps_per_dataset = sgd_steps_per_dataset
        self.measured = lead_sgd_steps is None
        self.max_lead = self._max_lead()
        self.lead: int = (
            min(_FIRST_LEAD, sgd_steps_per_dataset) if lead_sgd_steps is None else lead_sgd_steps
        )
        self.clock = clock
        self.sgd_steps_left = 0  # of the dataset being trained on
        self.step_seconds: float | None = None
        self._last_step_at = 0.0
        self._training_ended_at: float | None = None
        self._steps_left_when_sampled: int | None = None  # of the last dataset, if it was early
        self.waited_seconds = 0.0  # the learner's, between datasets, summed over the run

    def _max_lead(self) -> int:
        dataset_slots = max(1, self._slots_for(self.dataset_trajectories))
        # A lead of k datasets asks for k + 1 of them: never more than the slots hold.
        datasets = max(1, self.ledger.num_slots // dataset_slots - 1)
        bound = self.sgd_steps_per_dataset * datasets
        if self.measured:
            bound = min(
                bound, measured_lead_bound(self.sgd_steps_per_dataset, self.lag_target_datasets)
            )
        return bound

    def set_sgd_steps_per_dataset(self, steps: int) -> None:
        """The learner's epochs per dataset changed (`early_num_epochs`): the lead's bound
        follows, and a measured lead beyond the new bound is cut to it."""
        if steps != self.sgd_steps_per_dataset:
            self.sgd_steps_per_dataset = steps
            self._bound_changed()

    def set_dataset_trajectories(self, trajectories: int) -> None:
        """Datasets grew (`DatasetSizer`): fewer of them fit the slots, so the lead's bound
        follows, and a measured lead beyond it is cut to it."""
        self.dataset_trajectories = trajectories
        self._bound_changed()

    def _bound_changed(self) -> None:
        self.max_lead = self._max_lead()
        if self.measured:
            self.lead = min(self.lead, self.max_lead)

    # --- events from the learner worker ---------------------------------------------------------
    def set_rows_per_slot(self, rows: float) -> None:
        """The finished slots have brought `rows` of this policy's trajectories each, on
        average. Where policies share an env (self-play, a frozen opponent, a duel) that is a
        share of a slot's rows: the slots a dataset needs, and the datasets the slots hold,
        follow it."""
        if rows != self.rows_per_slot:
            self.rows_per_slot = rows
            self._bound_changed()

    def training_started(self, staged_trajectories: int) -> None:
        """The learner starts a dataset; `staged_trajectories` counts it and any beyond it."""
        now = self.clock()
        if self._training_ended_at is not None:
            waited = now - self._training_ended_at
            self.waited_seconds += waited
            if self.measured and self.step_seconds:
                waiting = self._complete_datasets_beyond(staged_trajectories)
                self._adjust_lead(waited=waited, datasets_waiting=waiting)
        self.sgd_steps_left = self.sgd_steps_per_dataset
        self._last_step_at = now
        self._steps_left_when_sampled = None

    @property
    def lead_at_cap(self) -> bool:
        """Whether sampling is held to the lead's bound: a measured lead at `max_lead`, or a
        lead set by hand."""
        return not self.measured or self.lead >= self.max_lead

    def sgd_step_done(self) -> None:
        now = self.clock()
        self.step_seconds = _running_mean(self.step_seconds, now - self._last_step_at)
        self._last_step_at = now
        self.sgd_steps_left -= 1

    def training_done(self) -> None:
        self.sgd_steps_left = 0
        self._training_ended_at = self.clock()

    def interrupted(self) -> None:
        """A pause or a command since the last dataset: the time until the next one is no
        measure of the lead (a 30 s pause once read as 30 s of waiting for data)."""
        self._training_ended_at = None

    def update(self, staged_trajectories: int) -> int:
        """Write how many slots may be on their way, given the trajectories the batcher holds
        (the current dataset's included while it is being trained on). Returns that number."""
        slots = 0
        ahead = self.lead - self.sgd_steps_left  # lead left after the current dataset
        if ahead >= 0:
            datasets = 1 + ahead // self.sgd_steps_per_dataset
            current = self.dataset_trajectories if self.sgd_steps_left > 0 else 0
            staged_beyond = max(staged_trajectories - current, 0)
            missing = max(datasets * self.dataset_trajectories - staged_beyond, 0)
            slots = self._slots_for(missing)
            self._note_early_data(staged_trajectories)
        self.ledger.set_sampling_slots(self.policy_id, slots)
        return slots

    def _slots_for(self, trajectories: int) -> int:
        return math.ceil(trajectories / self.rows_per_slot)

    def _complete_datasets_beyond(self, staged_trajectories: int) -> int:
        """Whole datasets sampled (staged, or finished and on their way) beyond the current
        one, which `staged_trajectories` includes."""
        finished = self.ledger.slots_in_flight(self.policy_id) - self.ledger.slots_being_filled()
        beyond = staged_trajectories - self.dataset_trajectories + finished * self.rows_per_slot
        return int(max(beyond, 0) // self.dataset_trajectories)

    def _note_early_data(self, staged_trajectories: int) -> None:
        """While training, remember how many steps were left when the next dataset had been
        sampled completely (or every rollout asked for had finished)."""
        if self.sgd_steps_left == 0 or self._steps_left_when_sampled is not None:
            return
        all_finished = (
            self.ledger.slots_being_filled() == 0
            and self.ledger.slots_in_flight(self.policy_id) > 0
        )
        if all_finished or self._complete_datasets_beyond(staged_trajectories):
            self._steps_left_when_sampled = self.sgd_steps_left

    def _adjust_lead(self, waited: float, datasets_waiting: int) -> None:
        step_seconds = self.step_seconds
        assert step_seconds is not None  # only called once an SGD step has been timed
        if waited > 0.5 * step_seconds:
            self.lead += math.ceil(waited / step_seconds)
        elif datasets_waiting >= 1:
            self.lead -= datasets_waiting * self.sgd_steps_per_dataset
        elif (self._steps_left_when_sampled or 0) >= 2:
            self.lead -= 1
        self.lead = max(0, min(self.lead, self.max_lead))


def measured_lead_bound(sgd_steps_per_dataset: int, lag_target_datasets: float = 0.0) -> int:
    """The largest measured lead: the mean lag, about (S + lead) / 2, stays within
    MEAN_LAG_TARGET (or `lag_target_datasets` x S where larger), or within 1.25 times the S / 2
    a dataset's own epochs make."""
    s = sgd_steps_per_dataset
    target = max(MEAN_LAG_TARGET, lag_target_datasets * s)
    return max(0, int(2 * target) - s, s // 4)


def _running_mean(mean: float | None, x: float) -> float:
    return x if mean is None else (1.0 - _SMOOTHING) * mean + _SMOOTHING * x
