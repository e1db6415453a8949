"""The replay's own figures, for `sampleforge bench` of an algorithm with a replay and for
`benchmarks/replay_bench.py`: memory per transition, sampling speed and sum-tree speed.

- `fill_by_random_play`: a `ReplayBuffer` filled, past its capacity so every ring has wrapped,
  with what uniformly random play of an env gives (its real observations: Atari frames compress
  as they do in training), in pieces of `PIECE` steps per stream as the sampler inserts them.
- `replay_speed`: on such a replay built with a run's settings (n-step, gamma, prioritized),
  the bytes it holds per transition; the bytes per transition of a full replay of the run's
  `replay_size` and streams (exact for everything stored raw, the compressed frames at the mean
  size measured here); and stacked batches of `batch_size` sampled, decoded and stacked per
  second on one thread; with the sum tree's sampled indices and priority updates per second at
  1M capacity in batches of 256.

Every speed is the median of timed runs, per wall-clock second and per CPU second of this process
(one thread: what one core does, however busy the machine is otherwise).

Must not: start processes or touch a user's experiment; it runs in the caller's process.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from sampleforge.buffers.replay import ReplayBuffer
from sampleforge.buffers.replay_layout import estimate_replay_bytes
from sampleforge.buffers.sum_tree import SumTree
from sampleforge.config import Config
from sampleforge.envs.registry import (
    EnvContext,
    env_seed,
    frame_stacked_keys,
    make_env,
    resolve_env,
)
from sampleforge.learners.probe_data import random_actions
from sampleforge.spaces import action_spec, actions_to_env, observation_specs, observation_to_dict

PIECE = 32  # steps per stream per insert, as a rollout of the sampler
SUM_TREE_CAPACITY, SUM_TREE_BATCH = 1_000_000, 256


@dataclass(frozen=True)
class ReplaySpeed:
    """The replay's figures (see the module docstring); `compressed_bytes_per_frame` is None
    for observations without frames."""

    bytes_per_transition_held: float
    bytes_per_transition_at_capacity: float
    compressed_bytes_per_frame: float | None
    batches_per_sec: float
    batches_per_cpu_sec: float
    sum_tree_samples_per_sec: float
    sum_tree_samples_per_cpu_sec: float
    sum_tree_updates_per_sec: float
    sum_tree_updates_per_cpu_sec: float


def median_rate(
    work: Callable[[], object], items: int, seconds: float, repeats: int
) -> tuple[float, float]:
    """Medians over `repeats` runs, each calling `work` for `seconds` (at least once: a run
    the scheduler kept waiting past `seconds` still times a call), of items per wall-clock
    second and items per CPU second of this process."""
    wall_rates, cpu_rates = [], []
    for _ in range(repeats):
        calls, start, cpu_start = 0, time.perf_counter(), time.process_time()
        while True:
            work()  # the result is dropped at once, as a consumer would
            calls += 1
            if (elapsed := time.perf_counter() - start) >= seconds:
                break
        wall_rates.append(calls * items / elapsed)
        cpu_rates.append(calls * items / max(time.process_time() - cpu_start, 1e-9))
    return statistics.median(wall_rates), statistics.median(cpu_rates)


def fill_by_random_play(
    env_name: str,
    *,
    capacity: int,
    streams: int,
    n_step: int,
    gamma: float,
    prioritized: bool,
    seed: int = 0,
) -> ReplayBuffer:
    """A replay of `capacity` transitions over `streams` envs of `env_name`, filled by uniformly
    random play until every ring has wrapped. An episode's end is stored as a termination
    (time limits included: only bytes and speeds are measured here)."""
    contexts = [EnvContext(env_index=s, seed=seed + s) for s in range(streams)]
    envs = [make_env(resolve_env(env_name), context) for context in contexts]
    try:
        replay = ReplayBuffer(
            capacity=capacity,
            num_streams=streams,
            obs_specs=observation_specs(envs[0].observation_space),
            action_spec=action_spec(envs[0].action_space),
            n_step=n_step,
            gamma=gamma,
            prioritized=prioritized,
            stacked_keys=frame_stacked_keys(envs[0]),
        )
        rng = np.random.default_rng(seed)
        last = [
            observation_to_dict(env.reset(seed=env_seed(context))[0], env.observation_space)
            for env, context in zip(envs, contexts)
        ]
        pieces = -(-(replay.slots_per_stream + 2 * PIECE) // PIECE)  # every ring wraps
        for piece in range(pieces):
            obs, actions, rewards, dones = _play_piece(envs, last, replay.obs_specs, rng)
            valids = np.ones_like(rewards)
            replay.add(
                np.arange(streams),
                obs,
                actions,
                rewards,
                dones,
                valids,
                starts=np.full(streams, piece == 0),
            )
    finally:
        for env in envs:
            env.close()
    return replay


def _play_piece(
    envs: list, last: list[dict[str, np.ndarray]], obs_specs: dict, rng: np.random.Generator
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """`PIECE` random steps of every env from its `last` observation (updated in place):
    obs [PIECE + 1, N, ...] per key, actions [PIECE, N, A], rewards and dones [PIECE, N]."""
    obs_space, act_space = envs[0].observation_space, envs[0].action_space
    obs = {
        k: np.zeros((PIECE + 1, len(envs), *s.shape), s.numpy_dtype) for k, s in obs_specs.items()
    }
    actions = random_actions(act_space, (PIECE, len(envs)), rng)
    rewards = np.zeros((PIECE, len(envs)), np.float32)
    dones = np.zeros((PIECE, len(envs)), np.float32)
    for t in range(PIECE + 1):
        for k in obs:
            obs[k][t] = np.stack([o[k] for o in last])
        if t == PIECE:
            break
        for i, (env, action) in enumerate(zip(envs, actions_to_env(actions[t], act_space))):
            o, r, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                o, _ = env.reset()
            last[i] = observation_to_dict(o, obs_space)
            rewards[t, i], dones[t, i] = float(r), terminated or truncated
    return obs, actions, rewards, dones


def replay_speed(
    cfg: Config,
    *,
    transitions: int = 20_000,
    streams: int = 4,
    seconds: float = 1.0,
    repeats: int = 3,
) -> ReplaySpeed:
    """The replay figures of `cfg`'s env and replay settings (module docstring): a replay of
    `transitions` filled by random play of `streams` envs, and a 1M sum tree."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core's figures; the caller's setting comes back after
    try:
        return _replay_speed(cfg, transitions, streams, seconds, repeats)
    finally:
        torch.set_num_threads(threads)


def _replay_speed(
    cfg: Config, transitions: int, streams: int, seconds: float, repeats: int
) -> ReplaySpeed:
    replay = fill_by_random_play(
        cfg.env,
        capacity=transitions,
        streams=streams,
        n_step=cfg.n_step,
        gamma=cfg.gamma,
        prioritized=cfg.prioritized_replay,
    )
    frame_bytes = replay.compressed_bytes_per_frame()
    full_bytes = estimate_replay_bytes(
        capacity=cfg.replay_size,
        num_streams=cfg.num_workers * cfg.num_envs_per_worker,
        obs_specs=replay.obs_specs,
        action_spec=replay.action_spec,
        n_step=cfg.n_step,
        stacked_keys=replay.stacked_keys,
        compressed_bytes_per_frame=round(frame_bytes or 0),
    )
    rng = np.random.default_rng(1)
    batches = median_rate(lambda: replay.sample(cfg.batch_size, rng), 1, seconds, repeats)
    samples, updates = sum_tree_rates(seconds, repeats)
    return ReplaySpeed(
        bytes_per_transition_held=replay.nbytes() / (replay.num_streams * replay.slots_per_stream),
        bytes_per_transition_at_capacity=full_bytes / cfg.replay_size,
        compressed_bytes_per_frame=frame_bytes,
        batches_per_sec=batches[0],
        batches_per_cpu_sec=batches[1],
        sum_tree_samples_per_sec=samples[0],
        sum_tree_samples_per_cpu_sec=samples[1],
        sum_tree_updates_per_sec=updates[0],
        sum_tree_updates_per_cpu_sec=updates[1],
    )


def sum_tree_rates(seconds: float, repeats: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """((wall, CPU) sampled indices/s, (wall, CPU) priority updates/s) of a full
    `SUM_TREE_CAPACITY` tree in batches of `SUM_TREE_BATCH`."""
    tree, rng = SumTree(SUM_TREE_CAPACITY), np.random.default_rng(2)
    tree.update(np.arange(SUM_TREE_CAPACITY), rng.random(SUM_TREE_CAPACITY))
    indices = [rng.integers(0, SUM_TREE_CAPACITY, SUM_TREE_BATCH) for _ in range(64)]
    values = [rng.random(SUM_TREE_BATCH) for _ in range(64)]
    calls = iter(range(1 << 62))

    def update() -> None:
        i = next(calls) % 64
        tree.update(indices[i], values[i])

    samples = median_rate(
        lambda: tree.sample(SUM_TREE_BATCH, rng), SUM_TREE_BATCH, seconds, repeats
    )
    return samples, median_rate(update, SUM_TREE_BATCH, seconds, repeats)
