"""The training probes (learners/registry.py: make_training_probe): each family's learner alone
on random data, as `sampleforge bench` times it."""

import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from sampleforge.buffers.rate_limiter import SampleToInsertRatio
from sampleforge.buffers.replay import ReplayBuffer
from sampleforge.buffers.replay_sampler import BackgroundSampler
from sampleforge.config import make_config
from sampleforge.envs.registry import env_info
from sampleforge.learners import registry
from sampleforge.learners.probe_data import fill_replay
from sampleforge.spaces import action_spec, observation_specs

CPU = torch.device("cpu")


def _sampler_threads() -> int:
    return sum(t.name == "replay-sampler" for t in threading.enumerate())


@pytest.mark.parametrize(
    "algorithm, env",
    [
        ("appo", "CartPole-v1"),
        ("dqn", "CartPole-v1"),
        ("rainbow", "CartPole-v1"),
        ("pqn", "CartPole-v1"),
        ("sac", "Pendulum-v1"),
        ("crossq", "Pendulum-v1"),
    ],
)
def test_each_family_s_probe_trains_and_leaves_no_thread(algorithm, env):
    # Small settings: the probe's cost, not the learner's speed, is what is checked.
    cfg = make_config(
        env=env,
        algorithm=algorithm,
        critic_hidden_sizes=[32],
        device="cpu",
        batch_size=32,
        num_batches_per_epoch=2,
        num_epochs=1,
        rollout=16,
        mlp_hidden_sizes=[32],
    )
    env = env_info(cfg.env)
    threads = _sampler_threads()
    probe = registry.make_training_probe(cfg, env.observation_space, env.action_space, CPU)
    try:
        probe.train_once()
        start = time.perf_counter()
        probe.train_once()
        seconds = time.perf_counter() - start
    finally:
        probe.close()
    assert _sampler_threads() == threads
    assert seconds > 0 and probe.samples_per_call > 0 and probe.sgd_steps_per_call > 0
    assert np.isfinite(seconds / probe.samples_per_call)


def test_a_replay_probe_s_call_stands_for_the_inserts_its_updates_need():
    cfg = make_config(
        env="CartPole-v1",
        algorithm="dqn",
        device="cpu",
        batch_size=32,
        samples_per_insert=8.0,
        mlp_hidden_sizes=[32],
    )
    env = env_info(cfg.env)
    probe = registry.make_training_probe(cfg, env.observation_space, env.action_space, CPU)
    probe.close()
    # Each update samples batch_size transitions; the limiter allows one per 8 sampled.
    assert probe.samples_per_call == probe.sgd_steps_per_call * 32 / 8.0


def test_every_family_has_a_probe():
    probed = set(registry.PROBES) | set(registry.REPLAY_LEARNERS)
    assert probed == set(registry.FAMILIES)
    assert not set(registry.PROBES) & set(registry.REPLAY_LEARNERS)


def test_a_replay_filled_with_frame_stacks_stores_one_new_frame_a_step():
    obs_space = gym.spaces.Box(0, 255, (4, 16, 16), np.uint8)
    replay = ReplayBuffer(
        capacity=4 * 40,
        num_streams=4,
        obs_specs=observation_specs(obs_space),
        action_spec=action_spec(gym.spaces.Discrete(3)),
        n_step=3,
        gamma=0.99,
        stacked_keys=["obs"],
    )
    limiter = SampleToInsertRatio(1.0, 1, error_buffer=1e15)
    with BackgroundSampler(replay, limiter, batch_size=8, seed=0) as sampler:
        inserted = fill_replay(sampler, gym.spaces.Discrete(3), rollout=8)
        batch = sampler.get(timeout=10.0)
    assert inserted == 4 * 32  # pieces of 8 steps up to the 38 a ring of 40 takes
    assert replay.num_sampleable > 0 and batch.actions.max() < 3
    store = replay._stores["obs"]
    # A stack slides by a frame a step: the first stack of each stream, then one per step.
    assert store.frames_stored == 4 * (4 + 32)
