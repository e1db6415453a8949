"""The episode windows file: restored only onto the checkpoints it was written with."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from sampleforge.checkpoint.episode_windows import (
    EPISODE_WINDOWS_FILENAME,
    restore_episode_windows,
    save_episode_windows,
)
from sampleforge.telemetry import EpisodeStatsWindow

CHECKPOINTS = {0: "/x/checkpoints/p0/checkpoint_000000012_4096.pt", 1: "ckpt_p1_8.pt"}


def _windows(*returns: float) -> dict[str, EpisodeStatsWindow]:
    run, policy = EpisodeStatsWindow(), EpisodeStatsWindow()
    run.add(list(returns), [10] * len(returns))
    policy.add(list(returns[:1]), [10] * len(returns[:1]))
    return {"run": run, "policy_0": policy}


def test_a_resume_from_the_same_checkpoints_continues_the_windows(tmp_path: Path) -> None:
    save_episode_windows(tmp_path, CHECKPOINTS, _windows(-21.0, -19.0, -20.0))
    windows = _windows()  # empty, as a resumed run's
    # Paths differ (another folder, a relative path) but the names are the checkpoints'.
    resumed = {0: "checkpoint_000000012_4096.pt", 1: "/elsewhere/ckpt_p1_8.pt"}
    assert restore_episode_windows(tmp_path, resumed, windows)
    assert windows["run"].count == 3 and windows["run"].mean_return == -20.0
    assert windows["run"].best_mean_return == -20.0
    assert windows["policy_0"].count == 1 and windows["policy_0"].mean_return == -21.0


def test_a_resume_from_another_checkpoint_starts_empty_and_says_why(tmp_path, caplog) -> None:
    save_episode_windows(tmp_path, CHECKPOINTS, _windows(1.0, 2.0))
    windows = _windows()
    older = {0: "checkpoint_000000011_3072.pt", 1: "ckpt_p1_8.pt"}
    with caplog.at_level(logging.WARNING):
        assert not restore_episode_windows(tmp_path, older, windows)
    assert windows["run"].count == 0
    assert "checkpoint_000000011_3072.pt" in caplog.text and "start empty" in caplog.text


def test_no_file_or_no_resumed_checkpoint_leaves_the_windows_empty(tmp_path: Path) -> None:
    windows = _windows()
    assert not restore_episode_windows(tmp_path, {0: "a.pt"}, windows)
    save_episode_windows(tmp_path, {0: "a.pt"}, _windows(3.0))
    assert not restore_episode_windows(tmp_path, {0: None}, windows)  # a fresh start
    assert windows["run"].count == 0


def test_a_damaged_file_changes_no_window(tmp_path: Path, caplog) -> None:
    save_episode_windows(tmp_path, {0: "a.pt"}, _windows(3.0, 4.0))
    path = tmp_path / EPISODE_WINDOWS_FILENAME
    # One window is malformed: the other must not be restored alone.
    saved = json.loads(path.read_text())
    saved["windows"]["policy_0"]["lengths"] = []
    path.write_text(json.dumps(saved))
    windows = _windows()
    with caplog.at_level(logging.WARNING):
        assert not restore_episode_windows(tmp_path, {0: "a.pt"}, windows)
    assert windows["run"].count == 0 and windows["policy_0"].count == 0
    assert "cannot be read" in caplog.text
    path.write_text("{not json")
    assert not restore_episode_windows(tmp_path, {0: "a.pt"}, windows)
