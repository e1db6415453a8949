"""Time limits are bootstrapped, terminations are not: the learned value of a probe env.

`ConstantRewardProbe` pays 1 per step, never changes its observation and ends every episode
after 20 steps. Ended by a time limit, the only consistent value is 1 / (1 - gamma) = 10 at
every step; ended by a termination, the value is the average of the discounted sums left,
(20 - sum_{k=1..20} 0.9^k) / (0.1 * 20) = 6.05. A learner that treats the time limit as a
termination learns 6.05 for both. Serial mode, a few seconds each.
"""

import pytest
import torch

from sampleforge.testing.probe_envs import (
    ConstantRewardProbe,
    constant_reward_values,
    register_probe_env,
    train_on_probe,
)

GAMMA, LENGTH = 0.9, 20


def _learned_value(tmp_path, ending: str, **overrides) -> float:
    name = register_probe_env(f"probe_constant_{ending}", episode_length=LENGTH, ending=ending)
    model = train_on_probe(
        name, ConstantRewardProbe(), str(tmp_path), 60_000, gamma=GAMMA, **overrides
    )
    with torch.no_grad():
        return model.act(
            {"obs": torch.ones(1, 1)}, torch.zeros(1, model.rnn_state_size)
        ).values.item()


@pytest.mark.slow
@pytest.mark.parametrize("with_vtrace", [True, False])
def test_time_limit_is_bootstrapped(tmp_path, with_vtrace):
    value = _learned_value(tmp_path, "time_limit", with_vtrace=with_vtrace)
    assert constant_reward_values(LENGTH, GAMMA, ending="time_limit")[0] == pytest.approx(10.0)
    assert value == pytest.approx(10.0, abs=0.3)


@pytest.mark.slow
@pytest.mark.parametrize("with_vtrace", [True, False])
def test_termination_is_not_bootstrapped(tmp_path, with_vtrace):
    value = _learned_value(tmp_path, "terminal", with_vtrace=with_vtrace)
    expected = constant_reward_values(LENGTH, GAMMA, ending="terminal").mean()
    assert expected == pytest.approx(6.05, abs=0.01)
    assert value == pytest.approx(expected, abs=0.5)
