"""Random training data in the shapes a learner gets, for timing a learner alone (the training
probes of `learners/registry.py`, which `sampleforge bench` measures).

Responsible for: observations, actions, time-major datasets (`learners/batcher.py: Dataset`)
and replay fills (`buffers/replay.py`) of random values that every learner accepts: actions
inside the action space, observations of the spaces' dtypes, every step valid and played by
policy 0.

Must not: train, time anything, or stand in for real data where a result depends on its values
(random frames compress worse than an env's, so a replay of them decodes a little slower).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from sampleforge.buffers.replay import ReplayBuffer
from sampleforge.buffers.replay_sampler import BackgroundSampler
from sampleforge.config import Config
from sampleforge.learners.batcher import Dataset
from sampleforge.spaces import TensorSpec, action_spec, categorical_sizes, observation_specs


def random_obs(
    specs: dict[str, TensorSpec], lead: tuple[int, ...], device: torch.device | None = None
) -> dict[str, torch.Tensor]:
    """Observations of shape `lead + spec.shape` per key: random pixels and floats; index
    observations (discrete, bits) are 0, which every such space holds."""
    out = {}
    for key, spec in specs.items():
        if spec.dtype == torch.uint8:
            out[key] = torch.randint(0, 256, lead + spec.shape, dtype=torch.uint8)
        elif spec.dtype != torch.float32:
            out[key] = torch.zeros(lead + spec.shape, dtype=spec.dtype)
        else:
            out[key] = torch.randn(lead + spec.shape)
    return {key: value.to(device or "cpu") for key, value in out.items()}


def random_actions(space: gym.Space, lead: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """[*lead, A] actions in the buffers' format (`spaces.action_spec`), uniform over the
    space (a Box's unbounded sides clipped to [-1, 1])."""
    spec = action_spec(space)
    if spec.dtype == torch.int64:
        sizes = np.asarray(categorical_sizes(space))
        return rng.integers(0, sizes, size=(*lead, len(sizes)))
    assert isinstance(space, gym.spaces.Box)  # action_spec allows nothing else
    low = np.maximum(space.low.reshape(-1), -1.0)
    high = np.minimum(space.high.reshape(-1), 1.0)
    return rng.uniform(low, high, size=(*lead, spec.shape[0])).astype(np.float32)


def random_dataset(
    cfg: Config,
    observation_space: gym.Space,
    action_space: gym.Space,
    rnn_state_size: int,
    device: torch.device | None = None,
) -> Dataset:
    """A dataset as the batcher forms it: `dataset_size // rollout` trajectories of `rollout`
    steps (plus the bootstrap step), all of them policy 0's, at version 0."""
    T, B = cfg.rollout + 1, cfg.dataset_size // cfg.rollout
    rng = np.random.default_rng(0)
    data = Dataset(
        obs=random_obs(observation_specs(observation_space), (T, B)),
        actions=torch.from_numpy(random_actions(action_space, (T, B), rng)),
        rnn_states=torch.zeros(T, B, rnn_state_size),
        rewards=torch.randn(T, B),
        dones=torch.zeros(T, B),
        valids=torch.ones(T, B),
        log_probs=torch.full((T, B), -1.0),
        values=torch.zeros(T, B),
        policy_versions=torch.zeros(T, B, dtype=torch.int64),
        policy_ids=torch.zeros(T, B, dtype=torch.int32),
    )
    return data.to(device or torch.device("cpu"))


def fill_replay(
    sampler: BackgroundSampler, action_space: gym.Space, rollout: int, seed: int = 0
) -> int:
    """Insert one random trajectory per stream of `sampler`'s replay, about as long as its
    rings, in pieces of at most `rollout` steps (as the stager inserts them); returns the
    transitions inserted. Frame stacks slide by one frame a step, as an env's do, so the
    replay stores one new frame per step."""
    replay = sampler.replay
    rng = np.random.default_rng(seed)
    streams = np.arange(replay.num_streams)
    steps_per_piece = max(1, min(rollout, replay.slots_per_stream - 2))
    pieces = max(1, (replay.slots_per_stream - 2) // steps_per_piece)
    obs = _random_stream_obs(replay, pieces * steps_per_piece + 1)
    inserted = 0
    for piece in range(pieces):
        first, lead = piece * steps_per_piece, (steps_per_piece, replay.num_streams)
        inserted += sampler.insert(
            streams,
            {k: v[first : first + steps_per_piece + 1] for k, v in obs.items()},
            random_actions(action_space, lead, rng),
            rng.standard_normal(lead).astype(np.float32),
            np.zeros(lead, np.float32),
            np.ones(lead, np.float32),
            starts=np.full(replay.num_streams, piece == 0),
        )
    return inserted


def _random_stream_obs(replay: ReplayBuffer, length: int) -> dict[str, np.ndarray]:
    """[length, streams, ...] observations per key; frame keys as sliding stacks of frames."""
    lead = (length, replay.num_streams)
    obs = {k: v.numpy() for k, v in random_obs(replay.obs_specs, lead).items()}
    for key in replay.stacked_keys:
        shape = replay.obs_specs[key].shape
        stack = shape[0]
        frames = np.random.default_rng(1).integers(
            0, 256, size=(length + stack - 1, replay.num_streams, *shape[1:]), dtype=np.uint8
        )
        # obs[t] = frames[t : t + stack], moved to [length, streams, stack, H, W]
        windows = np.stack([frames[i : i + length] for i in range(stack)], axis=2)
        obs[key] = np.ascontiguousarray(windows)
    return obs
