"""Frames-per-second over sliding time windows.

Responsibility: turn a stream of ``(time, cumulative count)`` samples (e.g.
total env steps at each report tick) into rates over recent windows such as
10 s and 60 s, in bounded memory.

What this module must not do: read counters from other components, print, or
sleep; the caller records samples and decides how to report them.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

__all__ = ["FpsMeter"]


class FpsMeter:
    """Rate of a monotonically growing counter over recent time windows.

    Samples older than ``max_window_sec`` are dropped (one is kept as the
    baseline for the longest window), and at most ``max_samples`` are held, so
    memory stays bounded however long the run is. If samples arrive faster
    than ``max_samples / max_window_sec`` per second the longest windows are
    effectively shortened; record at report frequency, not per step.
    """

    def __init__(
        self,
        max_window_sec: float = 300.0,
        max_samples: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Create an empty meter; ``clock`` is injectable for tests."""
        if max_window_sec <= 0 or max_samples < 2:
            raise ValueError("max_window_sec must be > 0 and max_samples >= 2")
        self.max_window_sec = max_window_sec
        self._clock = clock
        self._samples: deque[tuple[float, float]] = deque(maxlen=max_samples)
        self._first: tuple[float, float] | None = None

    def record(self, count: float, now: float | None = None) -> None:
        """Add a sample of the cumulative ``count`` at ``now`` (default: the clock)."""
        t = self._clock() if now is None else now
        sample = (t, float(count))
        if self._first is None:
            self._first = sample
        self._samples.append(sample)
        self._drop_old(t)

    def fps(self, window_sec: float) -> float:
        """Rate over the last ``window_sec`` seconds of samples (0.0 if unknown).

        The baseline is the newest sample at least ``window_sec`` older than
        the latest one, so the measured span is never shorter than asked; early
        in a run, when history is shorter, the oldest sample is used instead.
        """
        if len(self._samples) < 2:
            return 0.0
        t_last, c_last = self._samples[-1]
        baseline = self._samples[0]
        for sample in reversed(self._samples):
            if sample[0] <= t_last - window_sec:
                baseline = sample
                break
        return _rate(baseline, (t_last, c_last))

    def fps_since_start(self) -> float:
        """Average rate between the first and the latest sample ever recorded."""
        if self._first is None or not self._samples:
            return 0.0
        return _rate(self._first, self._samples[-1])

    def __len__(self) -> int:
        """Number of samples currently held."""
        return len(self._samples)

    def _drop_old(self, now: float) -> None:
        # Keep one sample older than the horizon: it is the longest window's baseline.
        horizon = now - self.max_window_sec
        while len(self._samples) >= 2 and self._samples[1][0] <= horizon:
            self._samples.popleft()


def _rate(start: tuple[float, float], end: tuple[float, float]) -> float:
    dt = end[0] - start[0]
    return (end[1] - start[1]) / dt if dt > 0 else 0.0
