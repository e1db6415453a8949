"""Back-pressure (learners/sampling_gate.py): how many slots rollout workers may fill for a
learner, and how the gate measures its lead."""

from __future__ import annotations

import pytest

from sampleforge.buffers.sampler_ledger import SamplerLedger
from sampleforge.learners import sampling_gate
from sampleforge.learners.sampling_gate import SamplingGate
from sampleforge.testing.fake_clock import FakeClock

ROWS = 8  # trajectories per slot
DATASET = 16  # trajectories per dataset: two slots
STEPS = 16  # SGD steps per dataset


@pytest.fixture(autouse=True)
def _no_lag_target(monkeypatch):
    """The feedback is tested on its own here; the lag target's cap in its own test."""
    monkeypatch.setattr(sampling_gate, "MEAN_LAG_TARGET", 1000)


def _gate(lead: int | None, num_workers: int = 1):
    ledger = SamplerLedger(num_workers, num_slots=6, num_policies=1)
    clock = FakeClock(0.0)
    gate = SamplingGate(ledger, 0, DATASET, ROWS, STEPS, lead, clock=clock)
    return gate, ledger, clock


def test_before_the_learner_speaks_every_slot_may_be_filled():
    _, ledger, _ = _gate(lead=2)
    for slot in range(6):
        assert ledger.sampling_allowed()
        ledger.take(slot, 0)
    assert not ledger.sampling_allowed()


def test_an_idle_learner_asks_for_exactly_its_missing_dataset():
    gate, ledger, _ = _gate(lead=2)
    assert gate.update(staged_trajectories=0) == 2
    ledger.take(0, 0)
    assert ledger.sampling_allowed()  # one slot on its way, two wanted
    ledger.take(1, 0)
    assert not ledger.sampling_allowed()  # a worker sees its own take at once: no overshoot
    ledger.hand_over(0, [0])
    assert not ledger.sampling_allowed()  # finished but not copied still counts
    ledger.reader_done(0, 0)
    assert gate.update(staged_trajectories=ROWS) == 1  # staged ones count too
    assert not ledger.sampling_allowed()
    assert gate.update(staged_trajectories=DATASET) == 0


def test_where_a_slot_brings_a_share_of_its_rows_the_slots_asked_for_follow_the_share():
    """Policies sharing an env (a duel, a frozen opponent): each slot brings this learner half
    its rows, so a dataset takes twice the slots, asked for at once, and a finished slot is
    half as much of the next dataset (the gate once counted whole slots as its rows)."""
    gate, ledger, _ = _gate(lead=None)
    assert (gate.update(staged_trajectories=0), gate.max_lead) == (2, 2 * STEPS)
    gate.set_rows_per_slot(ROWS / 2)
    assert (gate.update(staged_trajectories=0), gate.max_lead) == (4, STEPS)
    assert gate.update(staged_trajectories=ROWS) == 2
    ledger.hand_over(0, [0])
    ledger.hand_over(1, [0])  # two finished slots: half a dataset beyond the current one
    assert gate._complete_datasets_beyond(staged_trajectories=DATASET) == 0


def test_a_training_learner_holds_sampling_back_until_its_last_lead_steps():
    gate, ledger, _ = _gate(lead=2)
    gate.update(staged_trajectories=DATASET)
    gate.training_started(staged_trajectories=DATASET)
    opened_at = None
    for step in range(STEPS):
        slots = gate.update(staged_trajectories=DATASET)  # the current dataset, nothing beyond
        if slots and opened_at is None:
            opened_at = step
        assert ledger.sampling_allowed() == (slots > 0)
        gate.sgd_step_done()
    assert opened_at == STEPS - 2
    gate.training_done()
    assert gate.update(staged_trajectories=ROWS) == 1


def test_trajectories_staged_beyond_the_current_dataset_count_for_the_next():
    gate, _, _ = _gate(lead=2)
    gate.training_started(staged_trajectories=DATASET)
    for _ in range(STEPS - 1):
        gate.sgd_step_done()
    assert gate.update(staged_trajectories=DATASET + ROWS) == 1
    assert gate.update(staged_trajectories=2 * DATASET) == 0


def test_lead_zero_samples_only_while_the_learner_waits():
    gate, ledger, _ = _gate(lead=0)
    gate.training_started(staged_trajectories=DATASET)
    for _ in range(STEPS):
        assert gate.update(staged_trajectories=DATASET) == 0
        gate.sgd_step_done()
    gate.training_done()
    assert gate.update(staged_trajectories=0) == 2


def _one_dataset(gate, ledger, clock, step_seconds: float, sampling_seconds: float):
    """Train on a dataset while a worker samples the next one as soon as the gate opens (one
    slot, handed over `sampling_seconds` later). Returns the step at which sampling opened and
    whether the learner then had to wait for the data."""
    gate.training_started(staged_trajectories=DATASET)
    opened, finish_at = None, None
    for step in range(STEPS):
        if finish_at is not None and clock.now >= finish_at and ledger.slots_being_filled():
            ledger.hand_over(0, [0])
        if gate.update(staged_trajectories=DATASET) and opened is None:
            opened, finish_at = step, clock.now + sampling_seconds
            ledger.take(0, 0)
        clock.now += step_seconds
        gate.sgd_step_done()
    gate.training_done()
    if clock.now >= finish_at and ledger.slots_being_filled():
        ledger.hand_over(0, [0])  # finished during the last step
    waited = bool(ledger.slots_being_filled())
    if waited:
        gate.update(staged_trajectories=0)
        clock.now = max(clock.now, finish_at)
        ledger.hand_over(0, [0])
    gate.update(staged_trajectories=0)
    ledger.reader_done(0, 0)
    gate.update(staged_trajectories=DATASET)
    return opened, waited


# Times are multiples of powers of two, so the arithmetic is exact.
@pytest.mark.parametrize(
    "step_seconds, sampling_seconds, steps_needed",
    [
        (0.25, 1.1, 5),  # sampling a dataset takes 4.4 SGD steps
        (0.25, 0.1, 1),  # sampling is fast: start one step early
        (0.0625, 4.0, None),  # one rollout outlasts a dataset's training: overlap datasets
    ],
)
def test_the_measured_lead_settles_where_the_learner_no_longer_waits(
    step_seconds, sampling_seconds, steps_needed
):
    gate, ledger, clock = _gate(lead=None)
    assert gate.lead == 1  # the starting point
    history = [_one_dataset(gate, ledger, clock, step_seconds, sampling_seconds) for _ in range(16)]
    assert gate.step_seconds == pytest.approx(step_seconds)
    if steps_needed is not None:
        assert not any(waited for _, waited in history[-6:])
        # ... and sampling does not start much earlier than it must (that would add lag).
        assert steps_needed <= gate.lead <= steps_needed + 1
    else:
        # open from the first step, and for the dataset after next too, within the slots
        assert STEPS < gate.lead <= gate.max_lead == STEPS * 2 and history[-1][0] == 0
        assert gate.update(staged_trajectories=0) == 2 * (1 + (gate.lead - 0) // STEPS)


def test_the_lead_grows_at_once_when_the_learner_waits_and_shrinks_slowly():
    gate, ledger, clock = _gate(lead=None)
    _one_dataset(gate, ledger, clock, 0.25, 2.0)  # opens one step early: waits 7 steps
    _one_dataset(gate, ledger, clock, 0.25, 2.0)
    assert gate.lead == 1 + 7
    before = gate.lead
    _one_dataset(gate, ledger, clock, 0.25, 0.1)  # now the data comes 7 steps early
    _one_dataset(gate, ledger, clock, 0.25, 0.1)
    assert gate.lead == before - 1


def test_datasets_found_waiting_when_training_starts_shrink_the_lead_at_once():
    gate, ledger, clock = _gate(lead=None)
    for _ in range(4):
        _one_dataset(gate, ledger, clock, 0.0625, 4.0)
    assert gate.lead == gate.max_lead == 2 * STEPS
    assert gate.update(staged_trajectories=0) == ledger.num_slots == 6
    # The learner becomes the slow part: two whole datasets wait when it starts the next.
    gate.training_started(staged_trajectories=DATASET)
    gate.sgd_step_done()
    gate.training_done()
    for slot in range(4):
        ledger.take(slot, 0)
        ledger.hand_over(slot, [0])
    gate.training_started(staged_trajectories=DATASET)
    assert gate.lead == 0  # two datasets' steps less
    assert gate.update(staged_trajectories=DATASET) == 0  # the next dataset is there already


def test_a_fixed_lead_beyond_a_dataset_overlaps_the_datasets_after_the_next():
    gate, _, _ = _gate(lead=STEPS + 2)
    gate.training_started(staged_trajectories=DATASET)
    for _ in range(STEPS - 2):
        gate.sgd_step_done()
    # two steps left: the next dataset starts in 2 steps, the one after in 18
    assert gate.update(staged_trajectories=DATASET) == 2 * 2
    gate.sgd_step_done()
    assert gate.update(staged_trajectories=DATASET) == 2 * 2


def test_a_measured_lead_stops_at_the_mean_lag_target(monkeypatch):
    monkeypatch.setattr(sampling_gate, "MEAN_LAG_TARGET", 10)
    gate, ledger, clock = _gate(lead=None)
    assert gate.max_lead == 2 * 10 - STEPS
    for _ in range(4):
        _one_dataset(gate, ledger, clock, 0.25, 2.0)  # would need a lead of 9
    assert gate.lead == 4
    assert gate.lead_at_cap  # sampling is held to the lag target: a lag-bound run
    fixed, _, _ = _gate(lead=9)
    assert fixed.lead == 9  # a lead the user sets is theirs
    assert fixed.lead_at_cap


def test_a_learner_s_own_lag_target_lets_the_measured_lead_overlap_a_whole_dataset(monkeypatch):
    """PQN tolerates a lag of one dataset: where the actor-critic's target stops the lead at
    4 (the learner then waits), its lead grows to what the sampling needs."""
    monkeypatch.setattr(sampling_gate, "MEAN_LAG_TARGET", 10)
    ledger = SamplerLedger(1, num_slots=6, num_policies=1)
    clock = FakeClock(0.0)
    gate = SamplingGate(ledger, 0, DATASET, ROWS, STEPS, None, clock=clock, lag_target_datasets=1)
    assert gate.max_lead == STEPS  # mean lag (16 + 16) / 2: one dataset
    for _ in range(4):
        _one_dataset(gate, ledger, clock, 0.25, 2.0)  # sampling takes 8 steps
    assert gate.lead == 8 and not gate.lead_at_cap
    assert not _one_dataset(gate, ledger, clock, 0.25, 2.0)[1]  # the learner no longer waits


def test_the_learner_s_waits_for_data_are_summed_and_the_cap_is_only_reached_by_waiting():
    gate, ledger, clock = _gate(lead=None)
    assert gate.waited_seconds == 0.0 and not gate.lead_at_cap
    # Sampling opens one step before the end and takes 8 steps: the learner waits 7, counted
    # when it starts on the dataset it waited for (here: at the start of the second).
    _one_dataset(gate, ledger, clock, 0.25, 2.0)
    _one_dataset(gate, ledger, clock, 0.25, 2.0)
    assert gate.waited_seconds == pytest.approx(7 * 0.25)
    assert gate.lead == 8 and not gate.lead_at_cap  # the slots' bound is 2 datasets' steps


@pytest.mark.parametrize(
    "steps, bound",
    [
        (4, 16),
        (8, 12),
        (16, 4),  # mean lag (S + lead) / 2 within 10
        (20, 5),
        (320, 80),  # the epochs alone make more: the lead adds a quarter
    ],
)
def test_the_measured_lead_bound_keeps_the_mean_lag_near_its_target(monkeypatch, steps, bound):
    monkeypatch.setattr(sampling_gate, "MEAN_LAG_TARGET", 10)
    assert sampling_gate.measured_lead_bound(steps) == bound


@pytest.mark.parametrize("steps, bound", [(4, 16), (16, 16), (64, 64)])
def test_a_lag_target_of_one_dataset_bounds_the_lead_by_a_dataset(monkeypatch, steps, bound):
    """Mean lag (S + lead) / 2 within max(10, S): a lead of S once S passes 10."""
    monkeypatch.setattr(sampling_gate, "MEAN_LAG_TARGET", 10)
    assert sampling_gate.measured_lead_bound(steps, lag_target_datasets=1.0) == bound


def test_fewer_steps_per_dataset_cut_the_measured_lead_and_what_it_asks_for(monkeypatch):
    """`early_num_epochs` ends: datasets take 8 SGD steps instead of 16, so the bound on the
    lead and the sampling it opens follow at once."""
    monkeypatch.setattr(sampling_gate, "MEAN_LAG_TARGET", 10)
    gate, _, _ = _gate(lead=None)
    gate.lead = gate.max_lead = 2 * 10 - 8 + 10  # as if measured beyond the next bound
    gate.set_sgd_steps_per_dataset(8)
    assert gate.sgd_steps_per_dataset == 8
    assert gate.max_lead == 2 * 10 - 8 and gate.lead == 12
    gate.training_started(staged_trajectories=DATASET)
    assert gate.sgd_steps_left == 8
    # 8 steps left are within the lead of 12: the next dataset (two slots) may be sampled,
    # where 16 steps left would have held it back.
    assert gate.update(staged_trajectories=DATASET) == 2
    fixed, _, _ = _gate(lead=30)
    fixed.set_sgd_steps_per_dataset(8)
    assert fixed.lead == 30  # a lead the user sets is theirs


def test_more_steps_per_dataset_raise_the_bound_but_not_the_lead(monkeypatch):
    monkeypatch.setattr(sampling_gate, "MEAN_LAG_TARGET", 10)
    ledger = SamplerLedger(1, num_slots=6, num_policies=1)
    gate = SamplingGate(ledger, 0, DATASET, ROWS, 4, None, clock=FakeClock(0.0))
    assert gate.max_lead == 8  # the slots: two datasets of 4 steps
    gate.lead = 3
    gate.set_sgd_steps_per_dataset(8)
    assert gate.max_lead == 12 and gate.lead == 3


def test_grown_datasets_ask_for_more_slots_and_bound_the_lead_by_the_slots():
    """DatasetSizer doubles the datasets: the next one asks for twice the slots, and the lead's
    bound shrinks to what the slots can still hold ahead."""
    ledger = SamplerLedger(1, num_slots=6, num_policies=1)
    gate = SamplingGate(ledger, 0, DATASET, ROWS, 4, None, clock=FakeClock(0.0))
    gate.lead = gate.max_lead  # 8: the 6 slots hold two datasets of two slots ahead
    assert gate.update(staged_trajectories=0) == 2 * 2 + 2  # 1 + 8 // 4 datasets
    gate.set_dataset_trajectories(2 * DATASET)
    assert gate.max_lead == 4 and gate.lead == 4  # one dataset of four slots ahead
    assert gate.update(staged_trajectories=0) == 2 * 4
