"""DQN and Rainbow reach CartPole-v1's solve line, a greedy evaluation mean of 475 over 10
episodes, within 100k env steps (RL Zoo's DQN: 500 at 50k, by the same kind of evaluation).

The vector family's value-based recipe (`config/algorithm_defaults.py`) through the full
system: rollout workers, an inference worker, the learner with its replay and an evaluation
worker in their own processes, from the Python API. The run stops at the first evaluation that
reaches the line (`stop_on evaluation`): what a value-based method deploys is its greedy
policy, which its epsilon-greedy training episodes understate.
"""

import pytest

from sampleforge import DQN, Rainbow

BUDGET = 100_000
SOLVED = 475.0  # gymnasium's reward_threshold for CartPole-v1


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("algorithm", [DQN, Rainbow], ids=["dqn", "rainbow"])
def test_greedy_policy_reaches_the_solve_line_within_100k_steps(tmp_path, algorithm):
    with algorithm(
        "CartPole-v1",
        seed=1,
        train_dir=str(tmp_path),
        device="cpu",
        eval_every_env_steps=5_000,
        eval_episodes=10,
        stop_on="evaluation",
        stop_at_mean_return=SOLVED,
        report_every_sec=30,
    ) as model:
        summary = model.train(BUDGET)
        evaluation = model.runner.evaluation
        assert evaluation is not None
        reached_at = evaluation.last[0].env_steps  # the env steps its weights were taken at
    assert summary.stopped_because == "stop_at_mean_return", summary
    assert summary.best_eval_return is not None and summary.best_eval_return >= SOLVED
    assert reached_at <= BUDGET
