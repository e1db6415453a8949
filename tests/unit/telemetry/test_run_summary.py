"""Unit tests for RunSummary / write_summary: the stable summary.json interface."""

from __future__ import annotations

import json
from pathlib import Path

from sampleforge.telemetry import RunSummary, read_summary, write_summary

EXPECTED_KEYS = {
    "env_steps",
    "wall_seconds",
    "mean_fps",
    "mean_return_last_100",
    "best_mean_return",
    "mean_policy_lag",
    "experiment",
    "stopped_because",
    "best_eval_return",
    "world_size",
}


def _summary(**overrides: object) -> RunSummary:
    fields: dict[str, object] = {
        "env_steps": 1_000_000,
        "wall_seconds": 123.4,
        "mean_fps": 8103.7,
        "mean_return_last_100": 195.2,
        "best_mean_return": 200.0,
        "mean_policy_lag": 1.7,
        "experiment": "cartpole_appo",
        "stopped_because": "stop_at_mean_return",
        "best_eval_return": 480.5,
    }
    fields.update(overrides)
    return RunSummary(**fields)


def test_summary_keys_exact(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    write_summary(path, _summary())
    data = json.loads(path.read_text())
    assert set(data) == EXPECTED_KEYS
    assert data["env_steps"] == 1_000_000
    assert data["stopped_because"] == "stop_at_mean_return"
    assert read_summary(path) == _summary()
    assert list(tmp_path.iterdir()) == [path]  # no temp file left behind


def test_summary_none_and_nan_become_null(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    write_summary(path, _summary(mean_return_last_100=None, mean_policy_lag=float("nan")))
    data = json.loads(path.read_text())  # strict JSON, no NaN token
    assert data["mean_return_last_100"] is None
    assert data["mean_policy_lag"] is None


def test_a_summary_written_before_best_eval_return_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    write_summary(path, _summary())
    data = json.loads(path.read_text())
    del data["best_eval_return"]
    path.write_text(json.dumps(data))
    assert read_summary(path).best_eval_return is None
