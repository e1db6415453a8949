"""Unit tests for EpisodeStatsWindow and PopulationEpisodeWindows."""

from __future__ import annotations

import json

import pytest

from sampleforge.telemetry import EpisodeStatsWindow, PopulationEpisodeWindows


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


def test_state_round_trips_through_json_and_goes_on_counting() -> None:
    window = EpisodeStatsWindow(maxlen=3)
    window.add([5.0, 1.0], [50, 10])
    window.add([2.0, 3.0], [20, 30])  # window [1, 2, 3]; the best, 3, was [5, 1]'s
    restored = EpisodeStatsWindow(maxlen=3)
    restored.load_state_dict(json.loads(json.dumps(window.state_dict())))
    assert restored.state_dict() == window.state_dict()
    assert restored.best_mean_return == 3.0 and restored.mean_return == 2.0
    restored.add([6.0], [60])  # window [2, 3, 6]
    assert restored.mean_return == pytest.approx(11 / 3)
    assert restored.total_episodes == 5 and restored.count == 3


def test_a_smaller_window_keeps_the_newest_episodes() -> None:
    window = EpisodeStatsWindow(maxlen=4)
    window.add([1.0, 2.0, 3.0, 4.0], [1, 2, 3, 4])
    smaller = EpisodeStatsWindow(maxlen=2)
    smaller.load_state_dict(window.state_dict())
    assert smaller.mean_return == pytest.approx(3.5) and smaller.total_episodes == 4


def test_a_malformed_state_is_refused_and_changes_nothing() -> None:
    window = EpisodeStatsWindow()
    window.add([1.0], [10])
    bad = {**window.state_dict(), "lengths": []}
    with pytest.raises(ValueError, match="1 returns, 0 lengths"):
        window.load_state_dict(bad)
    assert window.count == 1 and window.mean_return == 1.0


def test_population_windows_count_the_fullness_of_the_emptiest_and_round_trip() -> None:
    windows = PopulationEpisodeWindows(2, maxlen=4)
    windows.add(0, [1.0] * 6, [1] * 6)
    windows.add(1, [3.0, 5.0], [2, 2])
    assert windows.count == 2 and windows.total_episodes == 8  # policy 1's window is half full
    assert windows.mean_return == 2.5 and windows.best_mean_return == 2.5
    windows.add(1, [-20.0] * 4, [2] * 4)
    assert windows.mean_return == -9.5 and windows.best_mean_return == 2.5
    restored = PopulationEpisodeWindows(2, maxlen=4)
    restored.load_state_dict(json.loads(json.dumps(windows.state_dict())))
    assert restored.state_dict() == windows.state_dict()
    with pytest.raises(ValueError, match="windows of policies"):
        PopulationEpisodeWindows(3, maxlen=4).load_state_dict(windows.state_dict())
