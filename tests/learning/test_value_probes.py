"""Every value-based algorithm learns the probe environments' exact action values through the
real system (serial mode: replay, background sampler, rate limiter and learner as in a run).

- `ObservationActionRewardProbe`: one-step episodes, Q(o, best) = +1 and Q(o, other) = -1. A
  Q-network blind to the observation, or a TD target that bootstraps through a termination
  (Q -> 1 / (1 - gamma)), or actions misaligned with their rewards, fails it.
- `DelayedRewardProbe`: Q([s, 0], .) = gamma s and Q([0, s], .) = s, with gamma = 0.8: a
  missing or doubled discount, the default gamma instead of the configured one, or a bootstrap
  from the wrong step is off by far more than the tolerance. Run for DQN and Rainbow: the
  scalar and the categorical target; the quantile heads share the bootstrap code with them.
"""

import numpy as np
import pytest
import torch

from sampleforge.testing.probe_envs import (
    DelayedRewardProbe,
    ObservationActionRewardProbe,
    register_probe_env,
    train_on_probe,
)

GAMMA = 0.8
VALUE_TOLERANCE = 0.05
# Few updates per insert and an early start: the probes need little data and few updates.
VALUE_TRAINING = dict(
    gamma=GAMMA,
    batch_size=64,
    rollout=16,
    learning_starts=256,
    samples_per_insert=4.0,
    learning_rate=1e-3,
    target_update_period=50,
    exploration_env_steps=2_000,
    v_min=-2.0,
    v_max=2.0,
    num_atoms=51,
    num_quantiles=32,
)
ALGORITHMS = ["dqn", "rainbow", "qrdqn", "iqn", "fqf", "mdqn"]


def _q_values(tmp_path, probe, algorithm, env_steps):
    name = register_probe_env(f"probe_{probe.__name__}", probe)
    model = train_on_probe(
        name,
        probe(),
        str(tmp_path),
        env_steps,
        algorithm=algorithm,
        **VALUE_TRAINING,
    )
    model.eval()
    with torch.no_grad():
        return model({"obs": torch.as_tensor(probe.OBSERVATIONS)}).numpy()


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_best_action_is_worth_plus_one_and_the_other_minus_one(tmp_path, algorithm):
    probe = ObservationActionRewardProbe
    q = _q_values(tmp_path, probe, algorithm, 4_000)
    rows = np.arange(len(probe.BEST_ACTIONS))
    np.testing.assert_array_equal(q.argmax(axis=1), probe.BEST_ACTIONS)
    np.testing.assert_allclose(q[rows, probe.BEST_ACTIONS], 1.0, atol=VALUE_TOLERANCE)
    worst = q[rows, 1 - probe.BEST_ACTIONS]
    if algorithm == "mdqn":  # the log-policy bonus of a never-chosen action is at its clip
        assert (worst < -1.0 + VALUE_TOLERANCE).all(), worst
    elif algorithm == "rainbow":  # noisy nets try the bad action less: it is learned less
        assert (worst < -0.5).all(), worst
    else:
        np.testing.assert_allclose(worst, -1.0, atol=VALUE_TOLERANCE)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["dqn", "rainbow"])  # a scalar and a distributional head
def test_values_are_discounted_once_by_the_configured_gamma(tmp_path, algorithm):
    """Both actions are worth the same here; the greedy one's value is the one exploration is
    sure to have trained (noisy nets may never try the other)."""
    probe = DelayedRewardProbe
    q = _q_values(tmp_path, probe, algorithm, 6_000)
    np.testing.assert_allclose(q.max(axis=1), probe.true_values(GAMMA), atol=VALUE_TOLERANCE)
