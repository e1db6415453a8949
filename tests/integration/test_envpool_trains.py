"""An EnvPool Atari env trains through the normal runtime: `envpool:Breakout-v5`, one rollout
worker whose two splits are each one EnvPool batch (`EnvPoolSplit`), a few thousand env frames."""

from __future__ import annotations

import pytest

from sampleforge.components import rollout_worker
from sampleforge.components.runner import Runner
from sampleforge.config import make_config
from sampleforge.envs import registry
from sampleforge.envs.envpool_env import envpool_unavailable_reason

UNAVAILABLE = envpool_unavailable_reason()
pytestmark = [
    pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE)),
    pytest.mark.filterwarnings("ignore:.*precision lowered:UserWarning"),
]

NAME = "envpool:Breakout-v5"


def _dispatches_to_envpool_split(make_env_split) -> bool:
    from sampleforge.envs.stepping.envpool_split import EnvPoolSplit

    split = make_env_split(
        env_spec=registry.resolve_env(NAME),
        worker_index=0,
        first_env_index=0,
        num_envs=1,
        seed=0,
        error_policy="fail",
    )
    split.close()
    return isinstance(split, EnvPoolSplit)


@pytest.mark.timeout(300)
def test_envpool_breakout_trains_a_few_thousand_steps(tmp_path):
    # What the rollout worker will call builds EnvPool batches.
    assert _dispatches_to_envpool_split(rollout_worker.make_env_split)
    cfg = make_config(
        env=NAME,
        preset="atari",
        num_workers=1,
        num_envs_per_worker=8,
        # One pass over each 1,024-step (4,096-frame) dataset keeps the test short.
        num_epochs=1,
        early_num_epochs=None,
        train_for_env_steps=8_000,
        device="cpu",
        train_dir=str(tmp_path),
        seed=0,
        report_every_sec=60,
    )
    with Runner(cfg) as runner:
        summary = runner.train()
        version = runner.progress.policy_version[0]
    assert summary.stopped_because == "train_for_env_steps", summary
    assert summary.env_steps >= 8_000  # frames: agent steps x 4
    assert version > 0  # the learner trained on what the EnvPool splits wrote
