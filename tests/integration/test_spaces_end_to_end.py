"""Every supported observation and action space trains through the real components.

Serial mode keeps these quick; the components and buffers are the same as in async mode.
"""

import json

import gymnasium as gym
import numpy as np
import pytest

from sampleforge.cli.main import main
from sampleforge.components.runner import Runner
from sampleforge.config import make_config
from sampleforge.envs import register_env
from sampleforge.testing import minigrid_like_env


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


class DiscreteObservationEnv(gym.Env):
    """Discrete observations with a start offset: the env's stepping converts them too."""

    observation_space = gym.spaces.Discrete(5, start=-2)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return -2, {}

    def step(self, action):
        self.t += 1
        return self.t % 5 - 2, float(action == self.t % 2), self.t >= 10, False, {}


class DiscreteDictEnv(gym.Env):
    """Dict of MultiDiscrete (with start), MultiBinary and Box parts."""

    observation_space = gym.spaces.Dict(
        {
            "cells": gym.spaces.MultiDiscrete([3, 300], start=[1, -5]),
            "flags": gym.spaces.MultiBinary(3),
            "vector": gym.spaces.Box(-1, 1, (2,), np.float32),
        }
    )
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.t += 1
        return self.observation_space.sample(), float(action), self.t >= 10, False, {}


register_env("test_dict_tuple", lambda ctx: DictTupleEnv(), overwrite=True)
register_env("test_multidiscrete", lambda ctx: MultiDiscreteEnv(), overwrite=True)
register_env("test_discrete_obs", lambda ctx: DiscreteObservationEnv(), overwrite=True)
register_env("test_discrete_dict", lambda ctx: DiscreteDictEnv(), overwrite=True)
MINIGRID = f"{minigrid_like_env.__name__}:{minigrid_like_env.ENV_ID}"


@pytest.mark.parametrize(
    "env,extra",
    [
        ("test_dict_tuple", {}),
        ("test_dict_tuple", {"rnn": "lstm", "rnn_size": 16, "shared_weights": False}),
        ("test_multidiscrete", {"rnn": "gru", "rnn_size": 16}),
        ("test_discrete_obs", {}),
        ("test_discrete_dict", {"normalize_obs": True}),
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


def _cli_train(train_dir, *flags: str) -> int:
    return main(
        [
            "train",
            "--env",
            MINIGRID,
            "--train_dir",
            str(train_dir),
            "--experiment",
            "grid",
            "--serial_mode",
            "--device",
            "cpu",
            "--seed",
            "1",
            "--report_every_sec",
            "60",
            "--tensorboard",
            "false",
            *flags,
        ]
    )


@pytest.mark.timeout(120)
def test_a_minigrid_like_env_learns_from_the_cli_with_only_drop_obs_keys(tmp_path) -> None:
    """Dict(7x7x3 image, Discrete direction, Text mission): with the mission dropped, the run
    reaches the env's reward threshold, which needs the one-hot direction (a policy blind to
    it averages 2 of the 5 needed)."""
    code = _cli_train(tmp_path, "--drop_obs_keys", "mission", "--train_for_env_steps", "60000")
    assert code == 0
    summary = json.loads((tmp_path / "grid" / "summary.json").read_text())
    assert summary["stopped_because"] == "stop_at_mean_return"  # the threshold was reached
    assert summary["mean_return_last_100"] > 4.0  # the last 100 episodes, twice the blind 2


def test_drop_obs_keys_naming_a_missing_key_is_one_line(tmp_path, capsys) -> None:
    assert _cli_train(tmp_path, "--drop_obs_keys", "missoin") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"sampleforge: env {MINIGRID!r}: --drop_obs_keys missoin: the observations have no key "
        "'missoin' (their keys: direction, image, mission)"
    )
    assert not (tmp_path / "grid").exists()  # refused before the experiment folder was made
