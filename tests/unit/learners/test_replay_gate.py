"""Unit tests for the ReplayRatioGate (learners/replay_gate.py): the slots sampling may have on
their way follow the replay's rate limiter, are written to the ledger, and the learner's wait
for data is measured."""

from __future__ import annotations

from sampleforge.buffers.rate_limiter import SampleToInsertRatio
from sampleforge.buffers.sampler_ledger import SamplerLedger
from sampleforge.learners.replay_gate import ReplayRatioGate
from sampleforge.testing.fake_clock import FakeClock

TRANSITIONS_PER_SLOT = 12
POLICY = 1


def _gate(limiter: SampleToInsertRatio, clock=None) -> tuple[ReplayRatioGate, SamplerLedger]:
    ledger = SamplerLedger(num_workers=2, num_slots=8, num_policies=2)
    kwargs = {} if clock is None else {"clock": clock}
    gate = ReplayRatioGate(ledger, POLICY, limiter, TRANSITIONS_PER_SLOT, **kwargs)
    return gate, ledger


def test_slots_allowed_follow_the_limiter_and_reach_the_ledger():
    # 2 samples per insert, sampling from 100 inserts on, 40 samples of slack either way.
    limiter = SampleToInsertRatio(2.0, min_size_to_sample=100, error_buffer=40.0)
    gate, ledger = _gate(limiter)

    # Before learning starts: the 100 inserts to go and 20 more, in whole slots (rounded up).
    assert gate.update(staged_trajectories=0) == 10
    assert int(ledger.sampling_slots[POLICY]) == 10
    assert int(ledger.sampling_slots[0]) == 8  # the other policy's entry is untouched
    assert gate.lead == 10 and not gate.lead_at_cap

    # The ratio's slack is used up and nothing sampled: sampling stops.
    limiter.inserted(120)
    assert gate.update(0) == 0
    assert int(ledger.sampling_slots[POLICY]) == 0
    assert gate.lead_at_cap

    # One insert allowed (2 samples): one whole slot, the overshoot within the slack.
    limiter.sampled(2)
    assert gate.update(0) == 1
    assert not gate.lead_at_cap
    # 30 samples taken: 15 inserts allowed, two slots.
    limiter.sampled(28)
    assert gate.update(0) == 2
    assert int(ledger.sampling_slots[POLICY]) == 2

    # The ledger holds sampling back by these slots: two in flight reach the budget.
    ledger.take(0, worker=0)
    assert ledger.sampling_allowed()  # policy 0's default budget still allows sampling
    ledger.set_sampling_slots(0, 0)
    assert ledger.sampling_allowed()  # one of two slots in flight
    ledger.take(1, worker=1)
    assert not ledger.sampling_allowed()


def test_waited_seconds_add_up_between_training_done_and_started_but_not_across_a_pause():
    clock = FakeClock(100.0)
    limiter = SampleToInsertRatio(1.0, min_size_to_sample=1, error_buffer=4.0)
    gate, _ = _gate(limiter, clock)
    gate.training_started(filled=1)  # the first start: no wait before it counted
    assert gate.waited_seconds == 0.0
    clock.now += 3.0  # training takes 3 s: not waiting
    gate.training_done()
    clock.now += 1.5
    gate.training_started(filled=1)
    assert gate.waited_seconds == 1.5
    clock.now += 7.0
    gate.training_done()
    clock.now += 0.25
    gate.sgd_step_done()
    gate.training_started(filled=1)
    assert gate.waited_seconds == 1.75
    clock.now += 2.0
    gate.training_started(filled=1)  # started twice without a done: no wait counted
    assert gate.waited_seconds == 1.75
    gate.training_done()
    gate.interrupted()  # a pause or a checkpoint: not a wait for data
    clock.now += 30.0
    gate.training_started(filled=1)
    assert gate.waited_seconds == 1.75
