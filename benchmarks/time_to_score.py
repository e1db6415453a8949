"""Env steps and wall time to a target mean return, over several seeds, async and serial.

    python benchmarks/time_to_score.py --env CartPole-v1 --target 450 --seeds 1 2 3

Prints one row per run and the medians. Each run is a fresh experiment in a temporary folder;
wall time includes starting the processes.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from sampleforge.cli.signals import exit_code_of
from sampleforge.components.runner import Runner
from sampleforge.config import make_config


def run_once(env: str, target: float, seed: int, serial: bool, budget: int) -> dict:
    with tempfile.TemporaryDirectory() as train_dir:
        cfg = make_config(
            env=env,
            train_dir=train_dir,
            seed=seed,
            serial_mode=serial,
            stop_at_mean_return=target,
            train_for_env_steps=budget,
            report_every_sec=60,
        )
        with Runner(cfg) as runner:
            s = runner.train()
            if runner.stop_signal is not None:  # Ctrl-C ends the benchmark, not one seed
                raise SystemExit(exit_code_of(runner.stop_signal))
    return {
        "seed": seed,
        "mode": "serial" if serial else "async",
        "env_steps": s.env_steps,
        "wall_seconds": s.wall_seconds,
        "mean_fps": s.mean_fps,
        "solved": s.stopped_because == "stop_at_mean_return",
        "lag": s.mean_policy_lag or 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--target", type=float, default=450.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--budget", type=int, default=1_000_000)
    args = parser.parse_args()
    print(
        f"{'mode':6} {'seed':>4} {'solved':>6} {'env_steps':>10} {'wall_s':>7} {'fps':>8} "
        f"{'lag':>5}"
    )
    for serial in (False, True):
        rows = [run_once(args.env, args.target, seed, serial, args.budget) for seed in args.seeds]
        for r in rows:
            print(
                f"{r['mode']:6} {r['seed']:>4} {str(r['solved']):>6} {r['env_steps']:>10,} "
                f"{r['wall_seconds']:>7.1f} {r['mean_fps']:>8,.0f} {r['lag']:>5.1f}"
            )
        print(
            f"{rows[0]['mode']:6} median        "
            f"{statistics.median(r['env_steps'] for r in rows):>10,.0f} "
            f"{statistics.median(r['wall_seconds'] for r in rows):>7.1f} "
            f"{statistics.median(r['mean_fps'] for r in rows):>8,.0f}"
        )


if __name__ == "__main__":
    main()
