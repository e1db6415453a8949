"""Evaluation episodes: true returns and lengths, repeatable per episode index whatever the
batching, lives versus games, and the policy's predict for every kind of space."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from sampleforge.config import make_config
from sampleforge.envs import EnvContext, EpisodeStatistics, register_env, resolve_env
from sampleforge.evaluation import EpisodeRunner, LocalPolicy, episode_seed, run_episodes


def _policy(obs_space, action_space, seed=0, **cfg):
    torch.manual_seed(seed)
    return LocalPolicy.build(make_config(**cfg), obs_space, action_space)


def _cartpole_policy(seed=0):
    env = gym.make("CartPole-v1")
    return _policy(env.observation_space, env.action_space, seed)


class _Lives(gym.Wrapper):
    """Ends the env (terminated) every 5 steps like a lost life; the game ends after 3 lives.

    EpisodeStatistics sits inside, so only the real game end carries info["episode"].
    """

    def __init__(self, env):
        super().__init__(env)
        self.steps = self.lives = 0

    def reset(self, **kwargs):
        if self.lives in (0, 3):
            self.lives = 0
            obs, info = self.env.reset(**kwargs)
        else:
            obs, info = self.env.unwrapped.state, {}
        self.steps = 0
        return np.asarray(obs, dtype=np.float32), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(0 if self.steps % 2 else 1)
        self.steps += 1
        if self.steps == 5:
            self.lives += 1
            if self.lives == 3:
                info["episode"] = {"r": 15.0, "l": 15}
            return obs, reward, True, False, info
        return obs, reward, terminated, truncated, {}


def make_lives_env(context: EnvContext) -> gym.Env:
    return _Lives(EpisodeStatistics(gym.make("CartPole-v1")))


def test_returns_are_repeatable_and_independent_of_batching():
    spec = resolve_env("CartPole-v1")
    policy = _cartpole_policy()
    one = run_episodes(policy, spec, 6, seed=3, num_envs=1)
    many = run_episodes(policy, spec, 6, seed=3, num_envs=4)
    assert one == many and one.num_episodes == 6
    assert one.returns == tuple(float(n) for n in one.lengths)
    later = run_episodes(policy, spec, 2, seed=3, first_episode=4)
    assert later.returns == one.returns[4:]
    assert run_episodes(policy, spec, 6, seed=4).returns != one.returns


def test_stochastic_evaluation_is_repeatable_with_a_seed():
    spec = resolve_env("CartPole-v1")
    policy = _cartpole_policy()
    first = run_episodes(policy, spec, 4, seed=9, deterministic=False)
    assert run_episodes(policy, spec, 4, seed=9, deterministic=False) == first


def test_episode_seeds_differ_per_episode_and_seed():
    assert episode_seed(None, 3) is None
    seeds = {episode_seed(1, i) for i in range(100)} | {episode_seed(2, i) for i in range(100)}
    assert len(seeds) == 200


def test_a_lost_life_does_not_end_the_episode():
    register_env("test_eval_lives", make_lives_env, overwrite=True)
    policy = _cartpole_policy()
    result = run_episodes(policy, resolve_env("test_eval_lives"), 2, seed=1, num_envs=1)
    assert result.returns == (15.0, 15.0) and result.lengths == (15, 15)


def test_frames_of_the_first_env_reach_the_callback():
    frames = []
    spec = resolve_env("CartPole-v1")
    with EpisodeRunner(
        _cartpole_policy(),
        spec,
        range(2),
        seed=1,
        num_envs=1,
        render_mode="rgb_array",
        on_frame=frames.append,
    ) as runner:
        runner.run()
        lengths = runner.result().lengths
    assert len(frames) == sum(n + 1 for n in lengths)  # the reset frame, then one per step
    assert frames[0].shape == (400, 600, 3) and frames[0].dtype == np.uint8


def test_evaluation_result_statistics():
    runner_result = run_episodes(_cartpole_policy(), resolve_env("CartPole-v1"), 3, seed=2)
    summary = runner_result.summary()
    assert summary["episodes"] == 3
    assert summary["min"] <= summary["mean"] <= summary["max"]
    assert summary["std"] == pytest.approx(np.std(runner_result.returns))


@pytest.mark.parametrize(
    "action_space,expected",
    [
        (gym.spaces.Discrete(3, start=2), int),
        (gym.spaces.MultiDiscrete([2, 3]), np.ndarray),
        (gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Discrete(4)]), tuple),
        (gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32), np.ndarray),
    ],
)
def test_predict_gives_actions_in_env_format(action_space, expected):
    obs_space = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
    policy = _policy(obs_space, action_space)
    action, state = policy.predict(obs_space.sample())
    assert isinstance(action, expected) and action_space.contains(action) and state is None
    batch, _ = policy.predict(np.stack([obs_space.sample() for _ in range(3)]))
    assert len(batch) == 3 and all(action_space.contains(a) for a in batch)


def test_predict_dict_observations_and_recurrent_state():
    obs_space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Box(-1, 1, (3,), np.float32),
            "img": gym.spaces.Box(0, 255, (3, 40, 40), np.uint8),
        }
    )
    policy = _policy(obs_space, gym.spaces.Discrete(4), rnn="lstm", rnn_size=8)
    one = obs_space.sample()
    action, state = policy.predict(one)
    assert state.shape == (16,) and 0 <= action < 4
    _, next_state = policy.predict(one, state)
    assert not np.allclose(next_state, state)
    batch = {k: np.stack([v, v]) for k, v in one.items()}
    actions, states = policy.predict(batch, np.stack([state, state]), deterministic=True)
    assert actions.shape == (2,) and states.shape == (2, 16)
    np.testing.assert_allclose(states[0], next_state, atol=1e-6)
    with pytest.raises(ValueError, match="state has shape"):
        policy.predict(one, np.zeros(3))


def test_predict_converts_discrete_observation_parts_in_batches_as_one_by_one():
    obs_space = gym.spaces.Dict(
        {
            "direction": gym.spaces.Discrete(4, start=1),
            "cells": gym.spaces.MultiDiscrete([3, 2], start=[-1, 0]),
        }
    )
    policy = _policy(obs_space, gym.spaces.Discrete(5))
    obs_space.seed(0)
    observations = [obs_space.sample() for _ in range(6)]
    one_by_one = [policy.predict(obs, deterministic=True)[0] for obs in observations]
    batch = {key: np.stack([obs[key] for obs in observations]) for key in obs_space.spaces}
    actions, _ = policy.predict(batch, deterministic=True)
    np.testing.assert_array_equal(actions, one_by_one)
