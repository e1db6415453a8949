"""Unit tests for MetricsWriter: progress.csv layout and TensorBoard event files."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from sampleforge.telemetry import MetricsWriter


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_csv_columns_and_new_key(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path, tensorboard=False) as writer:
        writer.write(100, {"perf/fps": 50.0, "episode/return_mean": 1.5}, wall_time=1.0)
        writer.write(200, {"perf/fps": 60.0, "episode/return_mean": 2.5}, wall_time=2.0)
        writer.write(300, {"perf/fps": 70.0, "losses/policy": -0.25}, wall_time=3.0)

    header, rows = _read_csv(tmp_path / "progress.csv")
    assert header == ["env_steps", "wall_time", "episode/return_mean", "losses/policy", "perf/fps"]
    assert [r["env_steps"] for r in rows] == ["100", "200", "300"]
    assert [r["wall_time"] for r in rows] == ["1.0", "2.0", "3.0"]
    assert [r["perf/fps"] for r in rows] == ["50.0", "60.0", "70.0"]
    assert [r["episode/return_mean"] for r in rows] == ["1.5", "2.5", ""]
    assert [r["losses/policy"] for r in rows] == ["", "", "-0.25"]


def test_csv_is_readable_after_every_write(tmp_path: Path) -> None:
    writer = MetricsWriter(tmp_path, tensorboard=False)
    writer.write(1, {"a": 1.0})
    # Flushed per row: readable by another process before close().
    _, rows = _read_csv(tmp_path / "progress.csv")
    assert rows[0]["a"] == "1.0"
    assert float(rows[0]["wall_time"]) >= 0.0
    writer.close()
    writer.close()  # idempotent
    with pytest.raises(RuntimeError):
        writer.write(2, {"a": 2.0})


def test_resume_appends_with_existing_columns(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path, tensorboard=False) as writer:
        writer.write(1, {"a": 1.0, "b": 2.0}, wall_time=0.5)
    with MetricsWriter(tmp_path, tensorboard=False) as writer:
        writer.write(2, {"a": 3.0}, wall_time=0.7)
    header, rows = _read_csv(tmp_path / "progress.csv")
    assert header == ["env_steps", "wall_time", "a", "b"]
    assert [(r["a"], r["b"]) for r in rows] == [("1.0", "2.0"), ("3.0", "")]


def test_reserved_names_rejected(tmp_path: Path) -> None:
    with (
        MetricsWriter(tmp_path, tensorboard=False) as writer,
        pytest.raises(ValueError, match="reserved"),
    ):
        writer.write(1, {"env_steps": 1.0})


def test_tensorboard_event_file_created(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path) as writer:
        writer.write(10, {"perf/fps": 1.0, "policy_lag/mean": 0.5})
    events = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
