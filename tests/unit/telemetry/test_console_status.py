"""Unit tests for the console status line and the progress bar."""

from __future__ import annotations

import io

from sampleforge.telemetry import ProgressBar, format_status_line


def test_status_line_contains_numbers() -> None:
    line = format_status_line(
        env_steps=120_000,
        target_env_steps=1_000_000,
        fps={"10s": 9876.4, "60s": 9500.0},
        mean_return=21.5,
        mean_length=88.0,
        policy_lag=(0.0, 1.25, 4.0),
        losses={"policy": -0.0123, "value": 0.456},
        learning_rate=3e-4,
    )
    assert "\n" not in line
    for expected in (
        "120,000/1,000,000",
        "12.0%",
        "10s:9,876",
        "60s:9,500",
        "return 21.50",
        "len 88.0",
        "lag 0.0/1.2/4.0",
        "policy:-0.0123",
        "value:0.456",
        "lr 3.00e-04",
    ):
        assert expected in line, (expected, line)


def test_status_line_without_data() -> None:
    line = format_status_line(
        env_steps=5,
        target_env_steps=None,
        fps={},
        mean_return=None,
        mean_length=None,
        policy_lag=None,
        losses={},
        learning_rate=None,
    )
    assert line == "steps 5 | return n/a len n/a"


def test_progress_bar_disabled_when_not_tty_or_no_target() -> None:
    stream = io.StringIO()  # not a tty
    bar = ProgressBar(100, stream=stream)
    assert not bar.enabled
    bar.update_to(50)
    bar.close()
    assert stream.getvalue() == ""
    assert not ProgressBar(None, enabled=None).enabled


def test_progress_bar_enabled_tracks_steps() -> None:
    stream = io.StringIO()
    bar = ProgressBar(1000, initial=100, stream=stream, enabled=True)
    bar.update_to(400)
    bar.update_to(300)  # never moves backwards
    assert bar._bar is not None and bar._bar.n == 400
    bar.close()
    bar.close()
    assert "400" in stream.getvalue()
