"""A `train` call returns with the statistics of every env step it took: the runner sums the
call up only once each rollout worker has confirmed the Pause, which it sends after flushing
the statistics of its last steps (the API's loop: `train(n)` called repeatedly, by PBT drivers
too). What it counts then: the frames collected (the call's env steps count the samples the
learner trained on, whole rollouts) and the episodes finished.

The envs here take 0.3 s a step, longer than the final checkpoint: a worker is in the middle of
a step when the Pause comes, and its last statistics reach the runner well after the checkpoint
is written. Processes, not serial mode: only separate processes can be late.
"""

import pytest

from sampleforge import APPO
from sampleforge.testing import register_faulty_env

pytestmark = pytest.mark.timeout(120)

STEP_SECONDS = 0.3


def test_a_train_call_counts_the_steps_its_workers_took_before_the_pause(tmp_path):
    log = tmp_path / "steps"
    env = register_faulty_env(
        "slow_counted_steps",
        fault="hang_in_step",
        hang_seconds=STEP_SECONDS,
        after_steps=1,
        every=1,
        step_log=str(log),
        episode_length=1,  # an episode a step: the finished episodes count the steps too
    )
    settings = dict(num_workers=1, num_envs_per_worker=2, worker_num_splits=1, rollout=4)
    with APPO(env, train_dir=str(tmp_path), device="cpu", batch_size=8, **settings) as model:
        for call in range(2):
            summary = model.train(6)
            taken = log.stat().st_size
            progress = model.runner.progress
            assert summary.env_steps > 0
            # Every step the envs took is in the counts when the call returns.
            assert progress.frames_collected == taken, f"call {call}: took {taken}"
            assert progress.episodes.total_episodes == taken, f"call {call}: took {taken}"
