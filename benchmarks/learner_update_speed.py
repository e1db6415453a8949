"""Updates per second of one learner alone, on random data of an env's shapes.

    python benchmarks/learner_update_speed.py --algorithm sac --env HalfCheetah-v5 --threads 1
    python benchmarks/learner_update_speed.py --algorithm sac --env HalfCheetah-v5 --profile
    python benchmarks/learner_update_speed.py --algorithm rainbow --env atari_pong --copies 2 \
        --learner_precision bfloat16

The learner is the training probe `sampleforge bench` times (`learners/registry.py:
make_training_probe`): the algorithm's family defaults for the env, with any `sampleforge
train` flag given after the script's own on top, its replay filled with random transitions and
sampled by its own thread. Prints the median of `--repeats` timed runs of `--seconds` each;
with `--profile`, the operators that took the most time over 100 updates (`torch.profiler`).

With `--copies N` it runs N such learners at once, each a process of its own, and prints each
one's rate: with one copy per core, how much an update slows down when the other cores are as
busy as its own (shared caches and memory bandwidth, or virtual cores that share a physical
one). `sampleforge bench`'s compute limit adds up costs measured alone; this says how much of
that a machine whose cores are all busy can give.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import torch

from sampleforge.config import Config
from sampleforge.config.cli_args import parse_config
from sampleforge.config.validation import ConfigError
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
    parser.add_argument(
        "--copies", type=int, default=1, help="learners timed at once, a process each"
    )
    args, config_flags = parser.parse_known_args()
    if args.copies < 1:
        parser.error(f"--copies {args.copies}: expected at least 1")
    try:
        cfg = parse_config(
            ["--algorithm", args.algorithm, "--env", args.env, "--device", "cpu", *config_flags]
        )
    except ConfigError as error:
        parser.error(str(error))
    if args.copies > 1:
        _time_copies(args.copies)
        return
    rates = _time_updates(cfg, args)
    print(
        f"{args.algorithm} on {args.env}'s shapes, batch {cfg.batch_size}, "
        f"{args.threads} thread(s): {statistics.median(rates):.1f} updates/s "
        f"(runs: {', '.join(f'{r:.1f}' for r in rates)})",
        flush=True,
    )


def _time_updates(cfg: Config, args: argparse.Namespace) -> list[float]:
    """Updates per second of `--repeats` runs (and the profile, if asked)."""
    torch.set_num_threads(args.threads)
    info = env_info(args.env)
    probe = make_training_probe(
        cfg, info.observation_space, info.action_space, torch.device("cpu"), info.frame_stacked_keys
    )
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
        if args.profile:
            calls = max(1, 100 // probe.sgd_steps_per_call)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(calls):
                    probe.train_once()
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
        return rates
    finally:
        probe.close()


def _time_copies(copies: int) -> None:
    """This script with the same arguments but one copy, `copies` times at once."""
    argv = [sys.executable, __file__, *sys.argv[1:], "--copies", "1"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(copies)]
    try:
        outputs = [p.communicate()[0] for p in procs]
    finally:
        for p in procs:  # Ctrl-C: none outlives the script
            p.kill()
            p.wait()
    for i, (p, out) in enumerate(zip(procs, outputs)):
        print(f"copy {i + 1} of {copies} (exit {p.returncode}): {out.strip()}")


if __name__ == "__main__":
    main()
