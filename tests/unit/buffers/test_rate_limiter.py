"""The rate limiter holds the samples-per-insert ratio whichever side is faster."""

from __future__ import annotations

import math

import pytest

from sampleforge.buffers.rate_limiter import SampleToInsertRatio


def _run(limiter: SampleToInsertRatio, insert_speed: int, sample_speed: int, ticks: int) -> None:
    """Each tick the inserter offers `insert_speed` items and the sampler wants `sample_speed`;
    each does what the limiter allows (a batch of 32 samples at a time, or nothing)."""
    for _ in range(ticks):
        inserts = min(insert_speed, limiter.inserts_allowed())
        limiter.inserted(inserts)
        batches = min(sample_speed, limiter.samples_allowed()) // 32
        limiter.sampled(32 * batches)


@pytest.mark.parametrize(
    "insert_speed, sample_speed",
    [(100, 32), (4, 3200), (64, 256)],
    ids=["slow learner", "slow sampler", "matched"],
)
@pytest.mark.parametrize("ratio", [0.25, 4.0, 8.0])
def test_the_ratio_holds_whichever_side_is_slower(ratio, insert_speed, sample_speed):
    limiter = SampleToInsertRatio(ratio, min_size_to_sample=1000, error_buffer=max(64.0, ratio))
    _run(limiter, insert_speed, sample_speed, ticks=5_000)
    assert limiter.inserts > 2000  # neither side starved
    assert limiter.observed_samples_per_insert == pytest.approx(ratio, rel=0.05)
    # And at every moment: the balance stayed within its bounds (one batch of slack).
    balance = ratio * limiter.inserts - limiter.samples
    assert (
        ratio * 1000 - limiter.error_buffer - 32 <= balance <= ratio * 1000 + limiter.error_buffer
    )


def test_without_the_limiter_the_ratio_follows_the_speeds():
    """The same loop with a limiter that allows everything: the speeds decide the ratio, which is
    what the test above would see if the limiter did nothing."""
    free = SampleToInsertRatio(1.0, min_size_to_sample=1, error_buffer=1e12)
    _run(free, insert_speed=100, sample_speed=32, ticks=1000)
    assert free.observed_samples_per_insert == pytest.approx(0.32, rel=0.05)


def test_no_sampling_before_the_minimum_size_and_inserts_free_until_then():
    limiter = SampleToInsertRatio(2.0, min_size_to_sample=100, error_buffer=10.0)
    assert limiter.samples_allowed() == 0
    assert limiter.inserts_allowed() == 100 + 5  # the minimum, then error_buffer / ratio
    limiter.inserted(99)
    assert limiter.samples_allowed() == 0
    limiter.inserted(1)
    assert limiter.samples_allowed() == 10  # error_buffer's worth ahead of the ratio
    assert math.isnan(SampleToInsertRatio(1.0, 5, 2.0).observed_samples_per_insert)


def test_state_round_trips():
    limiter = SampleToInsertRatio(4.0, min_size_to_sample=10, error_buffer=8.0)
    limiter.inserted(50)
    limiter.sampled(120)
    other = SampleToInsertRatio(4.0, min_size_to_sample=10, error_buffer=8.0)
    other.load_state_dict(limiter.state_dict())
    assert (other.samples_allowed(), other.inserts_allowed()) == (
        limiter.samples_allowed(),
        limiter.inserts_allowed(),
    )


@pytest.mark.parametrize("saved_ratio, ratio", [(8.0, 2.0), (1.0, 8.0)], ids=["lower", "higher"])
def test_a_resume_at_another_ratio_goes_on_from_the_saved_balance_not_its_counts(
    saved_ratio, ratio
):
    """A resume with a new samples_per_insert once kept the counts: the balance moved by the
    change times every insert so far, and one side stalled for as long as the run had gone
    (no update for a million inserts at the lower ratio, no env step at the higher)."""
    saved = SampleToInsertRatio(saved_ratio, min_size_to_sample=1000, error_buffer=64.0)
    _run(saved, insert_speed=64, sample_speed=64 * 32, ticks=20_000)
    resumed = SampleToInsertRatio(ratio, min_size_to_sample=1000, error_buffer=64.0)
    resumed.load_state_dict(saved.state_dict())
    assert resumed.inserts == saved.inserts > 100_000
    assert resumed.samples_allowed() == saved.samples_allowed()  # unspent samples kept
    assert resumed.inserts_allowed() > 0
    inserts, samples = resumed.inserts, resumed.samples
    _run(resumed, insert_speed=64, sample_speed=64 * 32, ticks=1_000)
    new_inserts, new_samples = resumed.inserts - inserts, resumed.samples - samples
    assert new_inserts > 10_000 and new_samples / new_inserts == pytest.approx(ratio, rel=0.01)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"samples_per_insert": 0.0}, "samples_per_insert"),
        ({"samples_per_insert": math.inf}, "samples_per_insert"),
        ({"min_size_to_sample": 0}, "min_size_to_sample"),
        ({"error_buffer": 2.0, "samples_per_insert": 4.0}, "error_buffer"),
    ],
)
def test_bad_settings_are_refused(kwargs, match):
    settings = {"samples_per_insert": 1.0, "min_size_to_sample": 10, "error_buffer": 10.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        SampleToInsertRatio(**settings)
