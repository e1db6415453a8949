"""Atari Breakout runs through the whole system, writes a checkpoint, and a restart resumes it."""

import json

import pytest

pytest.importorskip("ale_py")

from sampleforge.checkpoint.store import checkpoint_info  # noqa: E402
from sampleforge.components.runner import Runner  # noqa: E402
from sampleforge.config import make_config  # noqa: E402


def _cfg(tmp_path, steps):
    # One SGD step per dataset keeps the test short; the atari family's other settings apply.
    return make_config(
        env="atari_breakout",
        experiment="breakout",
        train_dir=str(tmp_path),
        train_for_env_steps=steps,
        num_workers=2,
        num_envs_per_worker=4,
        rollout=16,
        batch_size=128,
        num_batches_per_epoch=1,
        num_epochs=1,
        early_num_epochs=None,
        device="cpu",
        seed=3,
        report_every_sec=30,
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_breakout_checkpoint_and_resume(tmp_path):
    with Runner(_cfg(tmp_path, 4_000)) as runner:
        first = runner.train()
        version = runner.progress.policy_version[0]
    checkpoints = sorted((tmp_path / "breakout" / "checkpoints" / "p0").glob("checkpoint_*.pt"))
    assert checkpoints, "no checkpoint written"
    assert first.env_steps >= 4_000 and version > 0
    saved_version, saved_env_steps = checkpoint_info(checkpoints[-1])  # the final checkpoint
    assert saved_version == version and saved_env_steps > 0

    with Runner(_cfg(tmp_path, 8_000)) as resumed:
        assert resumed.resume
        resumed.start()
        # The learner restored exactly the saved counters before training anything (a run
        # that ignored the checkpoint would start both at 0).
        assert resumed.progress.policy_version[0] == saved_version
        assert resumed.progress.env_steps[0] == saved_env_steps
        second = resumed.train()
    assert second.env_steps >= 8_000
    summary = json.loads((tmp_path / "breakout" / "summary.json").read_text())
    assert summary["env_steps"] == second.env_steps
    # Counters continued instead of restarting: the second run trained only the difference.
    assert resumed.progress.policy_version[0] > version
    assert second.env_steps - first.env_steps < 8_000
