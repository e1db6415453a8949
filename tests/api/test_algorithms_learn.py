"""IMPALA and A3C, through the Python API, reach a mean return of 400 (last 100 episodes) on
CartPole-v1 within 500k env steps (the window that stops the run; the final one stays close).

Both lack APPO's trust region, so they are run near on-policy: one SGD step per 512-sample
dataset, at a higher learning rate. Measured with these settings (async, 2 workers x 16 envs,
9 runs each): IMPALA 146k-211k env steps, A3C 143k-213k; with 2 epochs of 2 minibatches A3C
missed 400 within 500k steps in 1 run of 5, and with the vector family's 4 epochs of 4
(what CartPole-v1 gets unless told otherwise) both fell short (below).
"""

import pytest

from sampleforge import A3C, IMPALA

BUDGET = 500_000
# Few envs in flight too: with the 48-env default the lag doubles and, without a trust region,
# the policy can collapse (seen with both). The rest are the CartPole-tuned settings these
# figures were measured with; the vector family's PPO recipe (entropy 0.01, gradient norm 0.5,
# return normalisation) left A3C at 168 and IMPALA at 202 after 500k steps in one CI run.
NEAR_ON_POLICY = dict(
    num_epochs=1,
    num_batches_per_epoch=1,
    learning_rate=2e-3,
    num_envs_per_worker=16,
    entropy_coeff=0.003,
    max_grad_norm=4.0,
    normalize_returns=False,
    reward_scale=0.1,
)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("algorithm", [IMPALA, A3C], ids=["impala", "a3c"])
def test_reaches_400_on_cartpole(algorithm, tmp_path):
    with algorithm(
        "CartPole-v1",
        seed=1,
        stop_at_mean_return=400,
        train_dir=str(tmp_path),
        device="cpu",
        report_every_sec=60,
        tensorboard=False,
        **NEAR_ON_POLICY,
    ) as model:
        summary = model.train(BUDGET)
    assert summary.stopped_because == "stop_at_mean_return", summary
    # The window that stopped the run reached 400; episodes that finish while the workers
    # pause afterwards still enter the final window (one CI run ended at 397), so it only has
    # to stay close.
    assert summary.best_mean_return >= 400
    assert summary.mean_return_last_100 >= 375
    assert summary.env_steps <= BUDGET
    assert model.cfg.algorithm == algorithm.algorithm
