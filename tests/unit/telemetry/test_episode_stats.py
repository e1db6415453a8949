"""Unit tests for EpisodeStatsWindow."""

from __future__ import annotations

import pytest

from sampleforge.telemetry import EpisodeStatsWindow


def test_empty_window() -> None:
    window = EpisodeStatsWindow()
    assert window.count == 0
    assert window.mean_return is None and window.mean_length is None
    assert window.best_mean_return is None
    window.add([], [])
    assert window.best_mean_return is None


def test_means_and_best_over_window() -> None:
    window = EpisodeStatsWindow(maxlen=3)
    window.add([1.0, 2.0], [10, 20])
    assert window.mean_return == pytest.approx(1.5)
    assert window.mean_length == pytest.approx(15.0)
    assert window.best_mean_return == pytest.approx(1.5)

    window.add([9.0, 10.0], [30, 40])  # window now [2, 9, 10]
    assert window.count == 3 and window.total_episodes == 4
    assert window.mean_return == pytest.approx(7.0)
    assert window.mean_length == pytest.approx(30.0)
    assert window.best_mean_return == pytest.approx(7.0)

    window.add([0.0, 0.0, 0.0], [1, 1, 1])
    assert window.mean_return == 0.0
    assert window.best_mean_return == pytest.approx(7.0)  # best is kept


def test_mismatched_lengths_rejected() -> None:
    with pytest.raises(ValueError):
        EpisodeStatsWindow().add([1.0], [])
