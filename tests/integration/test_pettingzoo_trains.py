"""A PettingZoo parallel env trains through the multi-agent path: Knights-Archers-Zombies
(4 agents that die at different times), two policies, a few thousand agent steps."""

from __future__ import annotations

import warnings

import pytest

from sampleforge.components.runner import Runner
from sampleforge.config import make_config

pytest.importorskip("pettingzoo", reason="pip install 'sampleforge[pettingzoo]'")
pytest.importorskip("pygame", reason="the butterfly envs need pygame-ce")

KAZ = "pettingzoo:butterfly/knights_archers_zombies_v11"


@pytest.mark.timeout(240)
def test_knights_archers_zombies_trains_a_few_thousand_steps(tmp_path):
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    cfg = make_config(
        env=KAZ,
        train_dir=str(tmp_path),
        num_policies=2,
        num_workers=2,
        num_envs_per_worker=2,
        rollout=16,
        batch_size=256,
        num_batches_per_epoch=1,
        train_for_env_steps=4_000,
        seed=0,
        device="cpu",
        report_every_sec=60,
    )
    with Runner(cfg) as runner:
        summary = runner.train()
        versions = dict(runner.progress.policy_version)
    assert summary.stopped_because == "train_for_env_steps", summary
    assert summary.env_steps >= 4_000
    assert all(versions[p] > 0 for p in (0, 1)), versions  # both policies were trained
    assert runner.progress.episodes.total_episodes > 0
