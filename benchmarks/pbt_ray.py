"""PBT on Ray Tune against fixed hyperparameters: env steps to a CartPole mean return of 475.

    python benchmarks/pbt_ray.py                       # 4 PBT members vs 4 fixed members
    python benchmarks/pbt_ray.py --budget 8192 --perturbation_interval 4096 --target 40  # smoke

Both populations start from the same learning rates (`--learning_rates`, one member each). The
fixed members keep theirs (a grid search); the PBT members copy a better member's whole
learner state and mutate the learning rate every `--perturbation_interval` env steps. A
member's env steps count its lineage: a member that copied another continues that one's
counter. Each member stops at the target (`stop_at_mean_return`) or at `--budget` env steps.

Prints, and writes to `<out>/pbt_vs_fixed.csv`: each member's env steps to the target (or
"not reached"), the PBT population's first member to reach it, and the median fixed member.
Trials run in serial mode (one process, one CPU each), so the machine's CPUs bound how many
run at once; the result in env steps does not depend on that.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import tempfile
import time
from pathlib import Path

import ray

from sampleforge.tune.search import Range, SearchSpec, run_search


def steps_to_target(output: Path, target: float) -> dict[str, float]:
    """{trial: env steps of its first result at or above `target` (inf: never)}."""
    reached: dict[str, float] = {}
    for path in sorted((output / "ray").glob("*/progress.csv")):
        with open(path) as f:
            rows = list(csv.DictReader(f))
        trial = rows[0]["trial_id"]
        hits = [float(r["env_steps"]) for r in rows if float(r["mean_return"]) >= target]
        reached[trial] = min(hits, default=math.inf)
    return reached


def population(args: argparse.Namespace, search: str, output: Path) -> dict[str, float]:
    base = {
        "algorithm": "appo",
        "env": "CartPole-v1",
        "serial_mode": True,
        "num_workers": 1,
        "num_envs_per_worker": 16,
        "stop_at_mean_return": args.target,
        "seed": args.seed,
    }
    spec = SearchSpec(
        search=search,  # type: ignore[arg-type]
        base=base,
        output_dir=output,
        trial_env_steps=args.budget,
        params={"learning_rate": args.learning_rates},
        mutations={"learning_rate": Range(1e-5, 1e-2)} if search == "pbt" else {},
        num_samples=len(args.learning_rates) if search == "pbt" else 1,
        env_steps_per_iteration=args.perturbation_interval,
        perturbation_interval=args.perturbation_interval,
        seed=args.seed,
        verbose=0,
    )
    started = time.monotonic()
    run_search(spec)
    print(f"{search}: {time.monotonic() - started:.0f} s")
    return steps_to_target(output, args.target)


def _steps(steps: float, budget: int) -> str:
    return f"not within {budget:,} env steps" if math.isinf(steps) else f"{steps:,.0f} env steps"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--budget", type=int, default=500_000, help="env steps per member")
    parser.add_argument("--perturbation_interval", type=int, default=20_000)
    parser.add_argument("--learning_rates", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3, 3e-3])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="default: a temporary folder")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="pbt_ray_"))
    ray.init(include_dashboard=False, log_to_driver=False)
    try:
        fixed = population(args, "grid", out / "fixed")
        pbt = population(args, "pbt", out / "pbt")
    finally:
        ray.shutdown()
    median_fixed = statistics.median(fixed.values())
    first_pbt = min(pbt.values())
    rows = [("fixed", t, s) for t, s in fixed.items()] + [("pbt", t, s) for t, s in pbt.items()]
    with open(out / "pbt_vs_fixed.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["population", "trial", f"env_steps_to_{args.target:g}"])
        writer.writerows(rows)
    for population_name, trial, steps in rows:
        print(f"{population_name:6s} {trial:14s} {_steps(steps, args.budget)}")
    print(f"median fixed member: {_steps(median_fixed, args.budget)} to {args.target:g}")
    print(f"first PBT member:    {_steps(first_pbt, args.budget)} to {args.target:g}")
    print(f"table: {out / 'pbt_vs_fixed.csv'}")


if __name__ == "__main__":
    main()
