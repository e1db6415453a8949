"""A resumed run continues its last-100-episode windows instead of refilling them from a few
games (the summary's mean and best returns, the status line, `stop_at_mean_return`)."""

from __future__ import annotations

import json
from pathlib import Path

from sampleforge.checkpoint.episode_windows import EPISODE_WINDOWS_FILENAME
from sampleforge.components.runner import Runner
from sampleforge.config import make_config


def _runner(train_dir: Path) -> Runner:
    cfg = make_config(
        env="CartPole-v1",
        train_dir=str(train_dir),
        experiment="windows",
        serial_mode=True,
        serial_snapshot=False,  # the exact-resume snapshot would restore the windows itself
        seed=3,
        device="cpu",
        train_for_env_steps=8192,
        stop_at_mean_return=float("inf"),
        report_every_sec=60,
        tensorboard=False,
    )
    return Runner(cfg)


def test_a_resumed_run_starts_with_the_windows_of_its_checkpoint(tmp_path: Path) -> None:
    with _runner(tmp_path) as first:
        first.train()
        at_the_end = first.progress.episodes.state_dict()
    # The windows at the end of the call, with the episodes the workers flushed as they paused.
    saved = json.loads((tmp_path / "windows" / EPISODE_WINDOWS_FILENAME).read_text())["windows"]
    assert saved["run"] == at_the_end
    assert saved["run"]["policies"]["0"]["total_episodes"] > 100  # CartPole's first games are short

    with _runner(tmp_path) as resumed:
        resumed.start()
        assert resumed.progress.episodes.state_dict() == saved["run"]
        assert resumed.progress.episodes.count == 100
        assert resumed.population.returns[0].state_dict() == saved["run"]["policies"]["0"]

    # Without the file, the same resume starts with empty windows (what the file fixes).
    (tmp_path / "windows" / EPISODE_WINDOWS_FILENAME).unlink()
    with _runner(tmp_path) as bare:
        bare.start()
        assert bare.progress.episodes.count == 0
