"""Return normalisation: CartPole-v1 with every reward multiplied by 1,000 is solved as CartPole.

Solved means Gymnasium's line scaled the same way: a mean return of 475,000 over 100 episodes.
With `normalize_returns` the critic predicts returns in units of their running statistics, so
nothing else changes from the CartPole defaults (`reward_scale` stays 1). Without it, the value
loss is about a million times larger and its gradient swamps the shared encoder's
(tests/unit/learners/test_return_normalization.py shows the scale invariance of one update, in
CI). A benchmark, not a CI test: about 22 s of the suite's 15 minutes, run with
`pytest -m benchmark tests/learning/test_reward_scale_invariance.py`.
"""

import pytest

from sampleforge.components.runner import Runner
from sampleforge.config import make_config
from sampleforge.testing.probe_envs import register_scaled_cartpole

SCALE = 1000.0
SOLVED = 475 * SCALE
BUDGET = 800_000  # CartPole itself, normalised: 277k-500k steps (seeds 1-3)


@pytest.mark.benchmark
@pytest.mark.timeout(300)
def test_cartpole_with_rewards_times_1000_is_solved_with_return_normalisation(tmp_path):
    name = register_scaled_cartpole("cartpole_rewards_x1000", SCALE)
    cfg = make_config(
        env=name,
        train_dir=str(tmp_path),
        normalize_returns=True,
        reward_scale=1.0,
        train_for_env_steps=BUDGET,
        stop_at_mean_return=SOLVED,
        seed=3,
        device="cpu",
        report_every_sec=30,
    )
    with Runner(cfg) as runner:
        summary = runner.train()
    assert summary.stopped_because == "stop_at_mean_return", summary
    assert summary.best_mean_return >= SOLVED
    assert summary.mean_return_last_100 >= 400 * SCALE
