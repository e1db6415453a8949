"""Replay memory and speed on real Atari frames: bytes per transition, stacked batches per second,
sum-tree draws and priority updates per second.

    python benchmarks/replay_bench.py [--transitions 20000] [--repeats 5] [--json out.json]

The figures `sampleforge bench --algorithm rainbow` reports (`sampleforge/bench/replay_speed.py`),
for Pong and Breakout side by side: a replay of Rainbow's Atari settings (uint8 [4, 84, 84]
observations, n-step 3, prioritized), filled past its capacity of ``--transitions`` by
``--streams`` envs played by a uniformly random policy (random play moves the screen more than
a trained agent's does early on, and Breakout's random play loses lives often, so episode
starts are frequent), and priced at 1M transitions. Reports per game:

* bytes per transition held, and for a full 1M replay (``estimate_replay_bytes`` with the
  measured mean compressed frame size; target <= 500 B);
* stacked batches of 32 per second, one thread, sampled and decoded into obs and next_obs
  (target 1,000/s per CPU second);

and for a 1M-capacity ``SumTree`` with batches of 256: sampled indices per second and priority
updates per second (target 1M/s each). Every speed is the median of ``--repeats`` timed runs;
the machine's load average is printed beside them, since a shared machine slows everything.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict

from sampleforge.bench.replay_speed import replay_speed
from sampleforge.config import make_config

GAMES = ("atari_pong", "atari_breakout")
TARGETS = {
    "bytes_per_transition_at_capacity": "<= 500",
    "batches_per_cpu_sec": ">= 1,000",
    "sum_tree_samples_per_cpu_sec": ">= 1,000,000",
    "sum_tree_updates_per_cpu_sec": ">= 1,000,000",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transitions", type=int, default=20_000, help="capacity filled per game")
    parser.add_argument("--streams", type=int, default=4, help="envs (replay streams) per game")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per speed (median)")
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one timed run")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    figures: dict[str, object] = {"load_average_before": os.getloadavg()[0]}
    for game in GAMES:
        cfg = make_config(algorithm="rainbow", env=game, replay_size=1_000_000)  # n = 3, PER
        speed = replay_speed(
            cfg,
            transitions=args.transitions,
            streams=args.streams,
            seconds=args.seconds,
            repeats=args.repeats,
        )
        figures[game] = asdict(speed)
    figures["load_average_after"] = os.getloadavg()[0]
    games = [figures[game] for game in GAMES]
    print(f"{'figure':<36} {'Pong':>12} {'Breakout':>12}   target")
    for name in games[0]:  # type: ignore[attr-defined]
        row = [f"{g[name]:12,.1f}" for g in games]  # type: ignore[index]
        print(f"{name:<36} {' '.join(row)}   {TARGETS.get(name, '')}")
    print(
        f"load average (1 min): {figures['load_average_before']:.2f} before, "
        f"{figures['load_average_after']:.2f} after; {os.cpu_count()} cores"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
