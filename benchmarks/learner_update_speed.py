"""Updates per second of one learner alone, on random data of an env's shapes.

    python benchmarks/learner_update_speed.py --algorithm sac --env HalfCheetah-v5 --threads 1
    python benchmarks/learner_update_speed.py --algorithm sac --env HalfCheetah-v5 --profile

The learner is the training probe `sampleforge bench` times (`learners/registry.py:
make_training_probe`): the algorithm's family defaults for the env, its replay filled with
random transitions and sampled by its own thread. Prints the median of `--repeats` timed runs
of `--seconds` each; with `--profile`, the operators that took the most time over 100 updates
(`torch.profiler`).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sampleforge.config import make_config
from sampleforge.envs.registry import env_info
from sampleforge.learners.registry import make_training_probe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algorithm", default="sac")
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the learner")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    cfg = make_config(algorithm=args.algorithm, env=args.env, device="cpu")
    info = env_info(args.env)
    probe = make_training_probe(cfg, info.observation_space, info.action_space, torch.device("cpu"))
    try:
        for _ in range(10):  # warm-up: allocator, first-call costs
            probe.train_once()
        rates = []
        for _ in range(args.repeats):
            start, updates = time.perf_counter(), 0
            while time.perf_counter() - start < args.seconds:
                probe.train_once()
                updates += probe.sgd_steps_per_call
            rates.append(updates / (time.perf_counter() - start))
        print(
            f"{args.algorithm} on {args.env}'s shapes, batch {cfg.batch_size}, "
            f"{args.threads} thread(s): {statistics.median(rates):.1f} updates/s "
            f"(runs: {', '.join(f'{r:.1f}' for r in rates)})"
        )
        if args.profile:
            calls = max(1, 100 // probe.sgd_steps_per_call)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(calls):
                    probe.train_once()
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    finally:
        probe.close()


if __name__ == "__main__":
    main()
