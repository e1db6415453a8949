"""SAC and TD3 reach -200 on Pendulum-v1 within 20k env steps, by the mean of 10 deterministic
evaluation episodes (RL Zoo's SAC gets -157 and its TD3 -152 there).

The continuous family's recipe (`config/algorithm_defaults.py`) through the full system, from
the Python API, with a smaller network and batch than the recipe's 256 x 256 and 256 (the
recipe is sized for MuJoCo; these keep the test to a minute on 2 cores) and a 1k-step warm-up.
The run stops at the first evaluation that reaches the line (`stop_on evaluation`).
"""

import pytest

from sampleforge import SAC, TD3

BUDGET = 20_000
LINE = -200.0


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("algorithm", [SAC, TD3], ids=["sac", "td3"])
def test_pendulum_reaches_minus_200_within_20k_steps(tmp_path, algorithm):
    with algorithm(
        "Pendulum-v1",
        seed=1,
        train_dir=str(tmp_path),
        device="cpu",
        mlp_hidden_sizes=[64, 64],
        batch_size=128,
        samples_per_insert=128.0,  # one update per transition, as the recipe
        learning_starts=1_000,
        random_action_steps=1_000,
        eval_every_env_steps=2_000,
        eval_episodes=10,
        stop_on="evaluation",
        stop_at_mean_return=LINE,
        report_every_sec=30,
    ) as model:
        summary = model.train(BUDGET)
        evaluation = model.runner.evaluation
        assert evaluation is not None
        reached_at = evaluation.last[0].env_steps  # the env steps its weights were taken at
    assert summary.stopped_because == "stop_at_mean_return", summary
    assert summary.best_eval_return is not None and summary.best_eval_return >= LINE
    assert reached_at <= BUDGET
