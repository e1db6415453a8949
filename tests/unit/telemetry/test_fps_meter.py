"""Unit tests for FpsMeter on synthetic timestamps."""

from __future__ import annotations

import pytest

from sampleforge.telemetry import FpsMeter
from sampleforge.testing.fake_clock import FakeClock


def test_windows_on_synthetic_clock() -> None:
    clock = FakeClock()
    meter = FpsMeter(max_window_sec=60, clock=clock)
    steps = 0
    # 60 s at 100 steps/s, then 10 s at 1000 steps/s, one sample per second.
    for second in range(71):
        clock.now = 1000.0 + second
        meter.record(steps)
        steps += 100 if second < 60 else 1000

    assert meter.fps(10) == pytest.approx(1000.0)
    # Last 60 s: 50 s at 100/s plus 10 s at 1000/s.
    assert meter.fps(60) == pytest.approx((50 * 100 + 10 * 1000) / 60)
    assert meter.fps_since_start() == pytest.approx((60 * 100 + 10 * 1000) / 70)


def test_short_history_uses_oldest_sample() -> None:
    meter = FpsMeter()
    assert meter.fps(10) == 0.0
    meter.record(0, now=0.0)
    assert meter.fps(10) == 0.0
    meter.record(500, now=2.0)
    assert meter.fps(10) == pytest.approx(250.0)


def test_memory_bounded() -> None:
    meter = FpsMeter(max_window_sec=10, max_samples=1000)
    for i in range(10_000):
        meter.record(i * 10, now=float(i))
    assert len(meter) <= 12  # horizon of 10 s plus the baseline sample
    assert meter.fps(10) == pytest.approx(10.0)

    dense = FpsMeter(max_window_sec=1e9, max_samples=50)
    for i in range(1000):
        dense.record(i, now=float(i))
    assert len(dense) == 50
