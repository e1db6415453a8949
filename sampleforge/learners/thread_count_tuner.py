"""The learner's torch thread count, chosen by trial while it trains.

Responsible for: ``ThreadCountTuner``, which keeps a learner on whichever of one thread and
`learner_torch_threads` threads makes more SGD steps a second now (`--learner_threads_adaptive`).
Neither count is right everywhere: two spinning threads make a small network's update 1.25x
faster on a machine the run has to itself, and several times slower beside any other busy
process, where each thread waits for the other at every parallel region
(`docs/design_notes.md`). The machine's load changes during a run; so the tuner measures.

The measure is SGD steps per second of wall time, waits included. With a rate limiter (replay
families) or a sampling gate (on-policy ones) the learner's pace is tied to the sampler's, so
this one number sees both what a thread count does to the update and what a second busy thread
takes from the actors when they share its cores.

A trial is A-B-A: the rate over the last `window_seconds` on the current count (A); then the
other count (B), `settle_seconds` ignored (threads waking, caches) and the rate over the next
window; then A again, settled and measured the same way (windows rounded up to whole SGD steps).
B is chosen if it was faster than the mean of A's two windows by more than `margin`. Averaging
the windows on either side cancels a load that rises or falls steadily through the trial, which
would otherwise favour whichever count was measured when the machine was quieter; and a trial
that B loses costs no more than one that did not measure A again, since the learner goes back
to A either way. The first trial comes after the first window that follows a settling one (a learner's first steps are slower than its later ones); the next
`trial_every_seconds` after it, and each trial that confirms the count doubles that wait (up to
`MAX_BACKOFF` times), so a machine where one count always wins pays for few trials. Anything
that is not training between two datasets (a pause, a checkpoint, a change in the work per SGD
step) is reported with `interrupted()`: it ends a trial unjudged and starts a settling window.
The learner worker calls `trained` after every SGD step, between which no parallel region
runs, so a switch never lands inside one.

Must not: train, read the learner (the learner worker reports its SGD steps), or set
the thread count of any thread but the learner's own (torch fixes each thread's count at its
first parallel op, so a second learner thread would keep its count).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

log = logging.getLogger(__name__)

# A window's length: hundreds of SGD steps of a small network, dozens of a conv one.
WINDOW_SECONDS = 5.0
# How soon after a decision the other count is tried again (the machine's load may change).
TRIAL_EVERY_SECONDS = 60.0
# The longest wait between trials, in multiples of TRIAL_EVERY_SECONDS (after confirmations).
MAX_BACKOFF = 4
# What a switch's first moments are not judged on.
SETTLE_SECONDS = 0.5
# How much faster a trial must be to be kept: below it, windows differ by noise alone.
MARGIN = 0.03


@dataclass
class ThreadCountTuner:
    """Keeps the faster of 1 and `most` torch threads (see the module docstring)."""

    most: int
    set_threads: Callable[[int], None] = torch.set_num_threads
    clock: Callable[[], float] = time.perf_counter
    name: str = "learner"
    window_seconds: float = WINDOW_SECONDS
    trial_every_seconds: float = TRIAL_EVERY_SECONDS
    settle_seconds: float = SETTLE_SECONDS
    margin: float = MARGIN
    threads: int = field(init=False)  # the count the learner runs on now
    trials: int = field(init=False, default=0)
    # The count a trial is measured against (None outside a trial), its rate before the trial,
    # and the other count's rate once measured (then the kept count is measured again).
    _kept: int | None = field(init=False, default=None)
    _kept_rate: float = field(init=False, default=0.0)
    _trial_rate: float | None = field(init=False, default=None)
    # Until when steps are not counted (None: not settling), and whether the next window only
    # settles (True after a start or an interruption) instead of being measured.
    _settle_until: float | None = field(init=False, default=None)
    _settling_window: bool = field(init=False, default=True)
    _window_start: float | None = field(init=False, default=None)
    _window_steps: int = field(init=False, default=0)
    _next_trial: float = field(init=False, default=0.0)  # 0: after the first measured window
    _backoff: int = field(init=False, default=1)

    def __post_init__(self) -> None:
        if self.most < 2:
            raise ValueError(f"ThreadCountTuner needs most >= 2 threads; got {self.most}")
        self.threads = self.most

    @property
    def chosen(self) -> int:
        """The count the last trial chose (during a trial, the one it is measured against)."""
        return self.threads if self._kept is None else self._kept

    def trained(self, sgd_steps: int) -> None:
        """Note the SGD steps made since the last call (the first call after a start, a switch
        or an interruption only opens a window); may change the thread count."""
        now = self.clock()
        if self._settle_until is not None:
            if now < self._settle_until:
                return
            self._settle_until, self._window_start = None, None
        if self._window_start is None:
            self._start_window(now)
            return
        self._window_steps += sgd_steps
        elapsed = now - self._window_start
        if elapsed < self.window_seconds:
            return
        rate = self._window_steps / elapsed
        self._start_window(now)
        if self._settling_window:
            self._settling_window = False
        elif self._trial_rate is not None:
            self._decide(rate, now)
        elif self._kept is not None:
            self._measure_kept_again(rate, now)
        elif now >= self._next_trial:
            self._try_other(rate, now)

    def interrupted(self) -> None:
        """Time passed that was not training (a pause, a checkpoint, other work per SGD step):
        a trial in progress ends unjudged, and the next window only settles."""
        if self._kept is not None:
            if self.threads != self._kept:
                self._switch(self._kept, self.clock())
            self._kept, self._trial_rate = None, None
        self._window_start, self._settle_until = None, None
        self._settling_window = True

    def report(self) -> dict[str, float]:
        """Statistics for the training report."""
        return {
            "perf/learner_threads": float(self.chosen),
            "perf/learner_thread_trials": float(self.trials),
        }

    def _start_window(self, now: float) -> None:
        self._window_start, self._window_steps = now, 0

    def _switch(self, threads: int, now: float) -> None:
        """Run on `threads` from now on, not counting its first `settle_seconds`."""
        self.threads = threads
        self.set_threads(threads)
        self._settle_until = now + self.settle_seconds

    def _other(self, threads: int) -> int:
        return 1 if threads == self.most else self.most

    def _try_other(self, rate: float, now: float) -> None:
        """A's first window has ended: measure B."""
        self._kept, self._kept_rate = self.threads, rate
        self._switch(self._other(self.threads), now)
        self.trials += 1

    def _measure_kept_again(self, trial_rate: float, now: float) -> None:
        """B's window has ended: back to A for its second window."""
        assert self._kept is not None
        self._trial_rate = trial_rate
        self._switch(self._kept, now)

    def _decide(self, kept_rate_after: float, now: float) -> None:
        """A's second window has ended: B if it beat A's mean by the margin."""
        kept, trial_rate = self._kept, self._trial_rate
        assert kept is not None and trial_rate is not None
        kept_rate = (self._kept_rate + kept_rate_after) / 2.0
        self._kept, self._trial_rate = None, None
        trial = self._other(kept)
        if trial_rate > kept_rate * (1.0 + self.margin):
            log.info(
                "%s: %d torch thread(s) now (%.1f SGD steps/s against %.1f on %d)",
                self.name,
                trial,
                trial_rate,
                kept_rate,
                kept,
            )
            self._switch(trial, now)
            self._backoff = 1
        else:
            log.debug(
                "%s: staying on %d torch thread(s) (%.1f SGD steps/s against %.1f on %d)",
                self.name,
                kept,
                kept_rate,
                trial_rate,
                trial,
            )
            self._backoff = min(2 * self._backoff, MAX_BACKOFF)
        self._next_trial = now + self._backoff * self.trial_every_seconds
