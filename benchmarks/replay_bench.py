"""Replay memory and speed on real Atari frames: bytes per transition, stacked batches per second,
sum-tree draws and priority updates per second.

    python benchmarks/replay_bench.py [--transitions 20000] [--repeats 5] [--json out.json]

Fills a ``ReplayBuffer`` (uint8 [4, 84, 84] observations, n-step 3, prioritized) from
``--streams`` Pong and then Breakout envs played by a uniformly random policy (random play
moves the screen more than a trained agent's does early on, and Breakout's random play loses
lives often, so episode starts are frequent), ``--transitions`` per game, at that capacity:
the replay is full, so the figures are a full replay's. Reports per game:

* bytes per transition: ``ReplayBuffer.nbytes()`` over the transitions held (everything: rings,
  frame ids, sum tree, compressed frames and their Python objects), and the same for a 1M
  replay, estimated by ``estimate_replay_bytes`` with the measured mean compressed frame size
  (target <= 500 B);
* stacked batches of 32 per second, one thread (``torch.set_num_threads(1)``), sampled and
  decoded into obs and next_obs (target 1,000/s);

and for a 1M-capacity ``SumTree`` with batches of 256: sampled indices per second and priority
updates per second (target 1M/s each). Every speed is the median of ``--repeats`` timed runs;
the machine's load average is printed beside them, since a shared machine slows everything.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from sampleforge.buffers.replay import ReplayBuffer, estimate_replay_bytes
from sampleforge.buffers.sum_tree import SumTree
from sampleforge.envs.atari import make_atari_env
from sampleforge.envs.registry import EnvContext
from sampleforge.spaces import TensorSpec

OBS_SPECS = {"obs": TensorSpec(shape=(4, 84, 84), dtype=torch.uint8)}
ACTION_SPEC = TensorSpec(shape=(1,), dtype=torch.int64)
CHUNK = 32  # steps per add, as a rollout of the sampler


def fill(game: str, streams: int, transitions: int, seed: int) -> ReplayBuffer:
    """A full replay of `transitions` random-play steps of `game` from `streams` envs."""
    replay = ReplayBuffer(
        capacity=transitions,
        num_streams=streams,
        obs_specs=OBS_SPECS,
        action_spec=ACTION_SPEC,
        n_step=3,
        gamma=0.99,
        prioritized=True,
    )
    envs = [make_atari_env(game, EnvContext(seed=seed + s)) for s in range(streams)]
    rng = np.random.default_rng(seed)
    obs = np.stack([env.reset(seed=seed + s)[0] for s, env in enumerate(envs)])
    steps_per_stream = -(-transitions // streams) + 2 * CHUNK  # enough to wrap every ring
    for _ in range(steps_per_stream // CHUNK):
        trajectory = np.zeros((CHUNK + 1, streams, 4, 84, 84), np.uint8)
        trajectory[0] = obs
        actions = rng.integers(0, envs[0].action_space.n, size=(CHUNK, streams, 1))
        rewards, dones = np.zeros((CHUNK, streams), np.float32), np.zeros((CHUNK, streams))
        for t in range(CHUNK):
            for s, env in enumerate(envs):
                o, r, terminated, truncated, _ = env.step(int(actions[t, s, 0]))
                if terminated or truncated:  # truncations taken as ends too: rare, and only
                    o, _ = env.reset()  # the bytes and speeds are measured here
                trajectory[t + 1, s], rewards[t, s], dones[t, s] = o, r, terminated or truncated
        replay.add(
            np.arange(streams),
            {"obs": trajectory},
            actions,
            rewards,
            dones,
            np.ones((CHUNK, streams)),
        )
        obs = trajectory[-1]
    for env in envs:
        env.close()
    return replay


def median_rate(
    work: Callable[[], object], items: int, seconds: float, repeats: int
) -> tuple[float, float]:
    """Medians over `repeats` runs, each calling `work` for `seconds`, of items per wall-clock
    second and items per CPU second of this process (one thread: what one core would do,
    however busy the machine; cache and memory contention still count)."""
    wall_rates, cpu_rates = [], []
    for _ in range(repeats):
        calls, start, cpu_start = 0, time.perf_counter(), time.process_time()
        while (elapsed := time.perf_counter() - start) < seconds:
            work()  # the result is dropped at once, as a consumer would
            calls += 1
        wall_rates.append(calls * items / elapsed)
        cpu_rates.append(calls * items / (time.process_time() - cpu_start))
    return statistics.median(wall_rates), statistics.median(cpu_rates)


def replay_figures(game: str, args: argparse.Namespace) -> dict[str, float]:
    replay = fill(game, args.streams, args.transitions, seed=0)
    store = replay._stores["obs"]
    held = replay.num_streams * replay.slots_per_stream
    frame_bytes = store.compressed_bytes / store.frames_stored
    at_1m = estimate_replay_bytes(
        capacity=1_000_000,
        num_streams=args.streams,
        obs_specs=OBS_SPECS,
        action_spec=ACTION_SPEC,
        n_step=3,
        compressed_bytes_per_frame=round(frame_bytes),
    )
    rng = np.random.default_rng(1)
    batches, batches_cpu = median_rate(
        lambda: replay.sample(32, rng), 1, args.seconds, args.repeats
    )
    return {
        "bytes_per_transition": replay.nbytes() / held,
        "bytes_per_transition_1m_estimate": at_1m / 1_000_000,
        "compressed_bytes_per_frame": frame_bytes,
        "frames_per_transition": store.frames_stored / held,
        "batches32_per_sec_wall": batches,
        "batches32_per_cpu_sec": batches_cpu,
    }


def sum_tree_figures(args: argparse.Namespace) -> dict[str, float]:
    tree, rng = SumTree(1_000_000), np.random.default_rng(2)
    tree.update(np.arange(1_000_000), rng.random(1_000_000))
    indices = [rng.integers(0, 1_000_000, 256) for _ in range(64)]
    values = [rng.random(256) for _ in range(64)]
    k = iter(range(1 << 62))

    def update() -> None:
        i = next(k) % 64
        tree.update(indices[i], values[i])

    samples = median_rate(lambda: tree.sample(256, rng), 256, args.seconds, args.repeats)
    updates = median_rate(update, 256, args.seconds, args.repeats)
    return {
        "sum_tree_samples_per_sec_wall": samples[0],
        "sum_tree_samples_per_cpu_sec": samples[1],
        "sum_tree_updates_per_sec_wall": updates[0],
        "sum_tree_updates_per_cpu_sec": updates[1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transitions", type=int, default=20_000, help="capacity filled per game")
    parser.add_argument("--streams", type=int, default=4, help="envs (replay streams) per game")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per speed (median)")
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one timed run")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    figures: dict[str, object] = {"load_average_before": os.getloadavg()[0]}
    for game in ("PongNoFrameskip-v4", "BreakoutNoFrameskip-v4"):
        figures[game] = replay_figures(game, args)
    figures.update(sum_tree_figures(args))
    figures["load_average_after"] = os.getloadavg()[0]
    print(f"{'figure':<32} {'Pong':>12} {'Breakout':>12}   target")
    games = [figures["PongNoFrameskip-v4"], figures["BreakoutNoFrameskip-v4"]]
    targets = {"bytes_per_transition_1m_estimate": "<= 500", "batches32_per_cpu_sec": ">= 1,000"}
    for name in games[0]:  # type: ignore[attr-defined]
        row = [f"{g[name]:12,.1f}" for g in games]  # type: ignore[index]
        print(f"{name:<32} {' '.join(row)}   {targets.get(name, '')}")
    for name in figures:
        if name.startswith("sum_tree"):
            target = ">= 1,000,000" if "cpu" in name else ""
            print(f"{name + ' (1M, 256)':<44} {figures[name]:12,.0f}   {target}")
    print(
        f"load average (1 min): {figures['load_average_before']:.2f} before, "
        f"{figures['load_average_after']:.2f} after; {os.cpu_count()} cores"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
