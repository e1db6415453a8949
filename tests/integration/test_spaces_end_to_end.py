"""Every supported observation and action space trains through the real components.

Serial mode keeps these quick; the components and buffers are the same as in async mode.
"""

import gymnasium as gym
import numpy as np
import pytest

from sampleforge.components.runner import Runner
from sampleforge.config import make_config
from sampleforge.envs import register_env


class DictTupleEnv(gym.Env):
    """Dict(image uint8 + vector) observations, Tuple(Discrete, Discrete) actions."""

    observation_space = gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (3, 36, 36), np.uint8),
            "vector": gym.spaces.Box(-1, 1, (5,), np.float32),
        }
    )
    action_space = gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Discrete(2)))

    def __init__(self):
        self.t = 0

    def _obs(self):
        return {
            "image": np.full((3, 36, 36), self.t % 256, np.uint8),
            "vector": np.full(5, self.t / 20, np.float32),
        }

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        assert isinstance(action, tuple) and len(action) == 2
        self.t += 1
        return self._obs(), float(action[0] == 1), self.t >= 20, False, {}


class MultiDiscreteEnv(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.MultiDiscrete([3, 2, 4])

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        assert action.shape == (3,)
        self.t += 1
        return np.zeros(3, np.float32), float(action.sum()), self.t >= 15, False, {}


register_env("test_dict_tuple", lambda ctx: DictTupleEnv(), overwrite=True)
register_env("test_multidiscrete", lambda ctx: MultiDiscreteEnv(), overwrite=True)


@pytest.mark.parametrize(
    "env,extra",
    [
        ("test_dict_tuple", {}),
        ("test_dict_tuple", {"rnn": "lstm", "rnn_size": 16, "shared_weights": False}),
        ("test_multidiscrete", {"rnn": "gru", "rnn_size": 16}),
        ("Pendulum-v1", {"normalize_obs": True}),
    ],
)
@pytest.mark.timeout(120)
def test_trains_a_few_thousand_steps(tmp_path, env, extra):
    cfg = make_config(
        env=env,
        train_dir=str(tmp_path),
        serial_mode=True,
        device="cpu",
        train_for_env_steps=3_000,
        num_envs_per_worker=4,
        rollout=8,
        batch_size=64,
        stop_at_mean_return=float("inf"),
        report_every_sec=60,
        **extra,
    )
    with Runner(cfg) as runner:
        summary = runner.train()
        version = runner.progress.policy_version[0]
    assert summary.env_steps >= 3_000
    assert version > 10  # SGD steps happened
    assert summary.mean_return_last_100 is not None and np.isfinite(summary.mean_return_last_100)
