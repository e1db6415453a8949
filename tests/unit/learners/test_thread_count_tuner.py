"""ThreadCountTuner against a simulated machine: each thread count has an SGD-step rate that
may change with time (another process starting or ending), and the clock advances by the time
the learner's steps take at the count the tuner set."""

from __future__ import annotations

from typing import Callable

import pytest

from sampleforge.learners.thread_count_tuner import (
    MAX_BACKOFF,
    TRIAL_EVERY_SECONDS,
    ThreadCountTuner,
)

Rates = Callable[[float, int], float]  # (now, threads) -> SGD steps a second


class Machine:
    """SGD steps a second per thread count, a fake clock, and where the time went."""

    def __init__(self, rates: Rates) -> None:
        self.rates = rates
        self.now = 0.0
        self.threads = 2
        self.switches: list[tuple[float, int]] = []  # (when, to how many threads)
        self.seconds_on = {1: 0.0, 2: 0.0}

    def set_threads(self, threads: int) -> None:
        self.threads = threads
        self.switches.append((self.now, threads))

    def clock(self) -> float:
        return self.now

    def tuner(self) -> ThreadCountTuner:
        return ThreadCountTuner(2, set_threads=self.set_threads, clock=self.clock)

    def train(self, tuner: ThreadCountTuner, seconds: float, steps_per_call: int = 10) -> None:
        """Datasets of `steps_per_call` SGD steps for `seconds` of simulated time."""
        end = self.now + seconds
        while self.now < end:
            took = steps_per_call / self.rates(self.now, self.threads)
            self.now += took
            self.seconds_on[self.threads] += took
            tuner.trained(steps_per_call)

    def share_on_one_thread(self, tuner: ThreadCountTuner, seconds: float) -> float:
        self.seconds_on = {1: 0.0, 2: 0.0}
        self.train(tuner, seconds)
        return self.seconds_on[1] / seconds


def quiet(now: float, threads: int) -> float:  # two spinning threads on a machine of their own
    return {1: 88.0, 2: 110.0}[threads]


def busy(now: float, threads: int) -> float:  # the same beside another busy process
    return {1: 45.0, 2: 13.0}[threads]


def test_on_a_quiet_machine_the_faster_two_threads_stay_and_trials_back_off():
    machine = Machine(quiet)
    tuner = machine.tuner()
    machine.train(tuner, 1000.0)
    assert tuner.chosen == 2
    trials = [when for when, threads in machine.switches if threads == 1]
    gaps = [later - earlier for earlier, later in zip(trials, trials[1:])]
    assert trials[0] < 15.0  # after a settling window and a measured one
    assert [round(gap / TRIAL_EVERY_SECONDS) for gap in gaps] == [2, 4, 4, 4]  # up to MAX_BACKOFF
    assert MAX_BACKOFF == 4


def test_beside_a_busy_process_one_thread_is_chosen_within_the_first_trial():
    machine = Machine(busy)
    tuner = machine.tuner()
    machine.train(tuner, 30.0)
    assert tuner.chosen == 1 and machine.threads == 1
    assert [threads for _, threads in machine.switches] == [1, 2, 1]  # A-B-A, then B
    assert tuner.report()["perf/learner_threads"] == 1.0
    assert machine.share_on_one_thread(tuner, 300.0) > 0.9  # trials of two cost little


def test_the_choice_follows_the_machine_as_its_load_comes_and_goes():
    machine = Machine(lambda now, threads: (busy if 100 <= now < 500 else quiet)(now, threads))
    tuner = machine.tuner()
    quiet_start = machine.share_on_one_thread(tuner, 100.0)
    loaded = machine.share_on_one_thread(tuner, 400.0)
    quiet_again = machine.share_on_one_thread(tuner, 300.0)
    assert quiet_start < 0.15
    assert loaded > 0.5  # on one thread from the first trial after the load came
    assert quiet_again < 0.5  # back on two from the first trial after it went
    assert tuner.chosen == 2


def test_a_trial_faster_by_less_than_the_margin_is_not_kept():
    machine = Machine(lambda now, threads: {1: 101.0, 2: 100.0}[threads])  # 1% apart
    tuner = machine.tuner()
    machine.train(tuner, 300.0)
    assert tuner.trials >= 2
    assert [threads for _, threads in machine.switches] == [1, 2] * tuner.trials


def test_a_load_that_eases_through_a_trial_does_not_favour_the_count_measured_later():
    """Two threads are 3% faster throughout, while the machine gets 2% faster a second (another
    process winding down): against the window before it alone, one thread measured later
    would look 7% faster and win; against the mean of the windows either side it does not."""
    machine = Machine(lambda now, threads: {1: 97.0, 2: 100.0}[threads] * (1.0 + 0.02 * now))
    tuner = machine.tuner()
    machine.train(tuner, 25.0)
    assert tuner.trials == 1 and tuner.chosen == 2 and machine.threads == 2
    assert [threads for _, threads in machine.switches] == [1, 2]


def test_a_switch_is_not_judged_on_its_first_moments():
    """One thread is faster, but slow for half a second after each switch (waking threads,
    cold caches): judged on those moments, it would lose its trial."""
    machine = Machine(lambda now, threads: 100.0 if threads == 1 else 80.0)
    rates = machine.rates
    machine.rates = lambda now, threads: (
        5.0 if machine.switches and now - machine.switches[-1][0] < 0.4 else rates(now, threads)
    )
    tuner = machine.tuner()
    tuner.window_seconds = 0.5  # the window would hold the slow moments whole
    machine.train(tuner, 20.0, steps_per_call=1)
    assert tuner.chosen == 1


def test_an_interruption_ends_a_trial_unjudged_and_the_next_window_only_settles():
    machine = Machine(lambda now, threads: {1: 100.0, 2: 50.0}[threads])
    tuner = machine.tuner()
    machine.train(tuner, 11.0)  # a settling window, a measured one: the trial of one has begun
    assert machine.threads == 1 and tuner.trials == 1
    tuner.interrupted()  # e.g. paused between two calls to the API's train(steps)
    assert machine.threads == 2 and tuner.chosen == 2
    machine.now += 100.0
    machine.train(tuner, 4.0)  # inside the settling window: nothing judged
    assert tuner.trials == 1
    machine.train(tuner, 10.0)  # a measured window, then the trial again
    assert tuner.trials == 2
    machine.train(tuner, 10.0)
    assert tuner.chosen == 1


def test_fewer_than_two_threads_is_refused():
    with pytest.raises(ValueError, match="most >= 2 threads; got 1"):
        ThreadCountTuner(1)
