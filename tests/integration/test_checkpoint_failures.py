"""A checkpoint the disk cannot take (full, or a lost mount): periodic ones are tried again at
the next period while training goes on; a final one fails the call, naming the newest written.

Serial mode runs the learner in this process, so the store's writes can be made to fail here.
"""

from __future__ import annotations

import errno
import logging

import pytest

from sampleforge.checkpoint import CheckpointStore
from sampleforge.components.runner import Runner, TrainingError
from sampleforge.config import make_config

pytestmark = pytest.mark.timeout(120)


def _cfg(tmp_path):
    return make_config(
        env="CartPole-v1",
        train_dir=str(tmp_path),
        experiment="full_disk",
        serial_mode=True,
        seed=3,
        device="cpu",
        train_for_env_steps=16_384,
        stop_at_mean_return=float("inf"),
        save_every_sec=0.2,
        report_every_sec=60,
        tensorboard=False,
    )


def _disk_full_for(monkeypatch, saves: int) -> list[int]:
    """The store's next `saves` writes fail as on a full disk; returns the calls made."""
    real_save, calls = CheckpointStore.save, []

    def save(self, *args, **kwargs):
        calls.append(len(calls))
        if len(calls) <= saves:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(self, *args, **kwargs)

    monkeypatch.setattr(CheckpointStore, "save", save)
    return calls


def test_periodic_checkpoints_that_fail_are_tried_again_and_training_goes_on(
    tmp_path, monkeypatch, caplog
):
    calls = _disk_full_for(monkeypatch, saves=2)
    caplog.set_level(logging.WARNING)
    with Runner(_cfg(tmp_path)) as runner:
        summary = runner.train()
    assert summary.stopped_because == "train_for_env_steps"
    assert len(calls) > 2  # tried again after the failures
    assert "checkpoint of policy 0 not written: [Errno 28] No space left on device" in caplog.text
    assert CheckpointStore(tmp_path / "full_disk" / "checkpoints" / "p0").list()


def test_a_final_checkpoint_that_fails_fails_the_call_naming_the_newest_written(
    tmp_path, monkeypatch
):
    _disk_full_for(monkeypatch, saves=10**9)
    with Runner(_cfg(tmp_path)) as runner:
        with pytest.raises(TrainingError, match="final checkpoint of policy 0 was not written"):
            runner.train()
