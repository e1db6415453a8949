"""A clock for tests of code that takes one (`clock=`): time moves only when a test moves it.

Must not: be used outside tests.
"""

from __future__ import annotations


class FakeClock:
    """Returns `now` when called; a test advances time with `clock.now += seconds`."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
