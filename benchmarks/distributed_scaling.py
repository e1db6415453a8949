"""Data-parallel training at 1 and 2 ranks: throughput, the all-reduce's share of an SGD step,
and the learning curves against env steps (they must overlay: no sample efficiency lost).

    python benchmarks/distributed_scaling.py --env CartPole-v1 --steps 200000 --seeds 1 2 3

Per seed, one after another on the whole machine: `sampleforge train` (1 rank, no
torch.distributed at all) and `torchrun --standalone --nproc-per-node 2 -m sampleforge train
--distributed true`. The same learning work per sample on both: each of the 2 ranks collects
half the dataset (`--batch_size` halved), so an averaged SGD step sees as many samples as the
single rank's (`--per_rank_batch`: each rank the whole batch, DD-PPO's way, which halves the
SGD steps per sample). Prints per run the env steps and seconds to
each target return, the mean fps, and the all-reduce seconds over the learner's training
seconds (rank 0's, waiting for the other rank included); then the medians, and the scaling a
second machine would give, derived from the measured all-reduce share (see `projection`).
Writes `<out>/distributed_<env>.csv` and a plot of the curves, `<out>/distributed_<env>.png`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

from sampleforge.config import make_config
from sampleforge.telemetry.learning_curves import RETURN, first_reach, read_run
from sampleforge.testing.local_ranks import run_ranks


def _train(
    ranks: int, env: str, steps: int, seed: int, train_dir: Path, batch: int, extra: list[str]
) -> Path:
    name = f"{env}_r{ranks}_s{seed}"
    args = ["train", "--env", env, "--seed", str(seed), "--train_for_env_steps", str(steps),
            "--batch_size", str(batch),
            "--experiment", name, "--train_dir", str(train_dir), "--restart_behavior",
            "overwrite", "--stop_at_mean_return", "inf", *extra]  # fmt: skip
    if ranks == 1:
        cmd = [sys.executable, "-m", "sampleforge", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={ranks}", "-m", "sampleforge", *args,
               "--distributed", "true"]  # fmt: skip
    print(f"$ {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return train_dir / name


def _measure(path: Path, targets: list[float]) -> dict:
    run = read_run(path)
    summary = json.loads((path / "summary.json").read_text())
    last = {k: v[~np.isnan(v)][-1] for k, v in run.columns.items() if (~np.isnan(v)).any()}
    train_sec = last.get("perf/learner_train_sec", float("nan"))
    share = last.get("perf/allreduce_sec", 0.0) / train_sec if train_sec else float("nan")
    row = {
        "fps": summary["mean_fps"],
        "final_return": summary["mean_return_last_100"],
        "allreduce_share": share,
    }
    for t in targets:
        reach = first_reach(run, t)
        row[f"steps_to_{t:g}"], row[f"sec_to_{t:g}"] = reach if reach else (None, None)
    return row


def _time_step_and_allreduce(rank, env: str, reps: int) -> dict:
    """On rank 0 alone (rank 1 idle): seconds per SGD step of the env's learner; then on both
    at once: seconds per all-reduce of that model's gradients."""
    import time

    import torch
    import torch.distributed as dist

    from sampleforge.distributed.learner_group import LearnerGroup
    from sampleforge.envs.registry import env_info
    from sampleforge.learners.registry import make_training_probe
    from sampleforge.models.factory import make_policy_model

    torch.set_num_threads(1)
    cfg = make_config(env=env)
    info = env_info(env)
    cpu = torch.device("cpu")
    group = LearnerGroup(rank, 0, cpu, 120.0)
    step = float("nan")
    if rank.is_main:
        probe = make_training_probe(cfg, info.observation_space, info.action_space, cpu)
        probe.train_once()  # warm-up
        started = time.perf_counter()
        for _ in range(max(1, reps // probe.sgd_steps_per_call)):
            probe.train_once()
        calls = max(1, reps // probe.sgd_steps_per_call)
        step = (time.perf_counter() - started) / (calls * probe.sgd_steps_per_call)
        probe.close()
    dist.barrier()
    model = make_policy_model(cfg, info.observation_space, info.action_space)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    group.average_gradients(model.parameters(), True)  # warm-up
    started = time.perf_counter()
    for _ in range(reps):
        group.average_gradients(model.parameters(), True)
    allreduce = (time.perf_counter() - started) / reps
    numel = sum(p.numel() for p in model.parameters())
    group.close()
    return {"sgd_step_sec": step, "allreduce_sec": allreduce, "gradient_bytes": 4 * numel}


def projection(share: float, machines: int = 2) -> float:
    """Throughput of `machines` machines over one's, for a learner-bound run whose SGD step
    is a fraction `share` all-reduce: every machine samples and trains its own data, so a step
    that took T now takes T / (1 - share) and `machines` of them run at once. (Loopback
    all-reduce; a network adds its transfer time: bytes x 2 (N-1)/N over the bandwidth.)"""
    return machines * (1.0 - share)


def _plot(runs: dict[tuple[int, int], Path], out: Path, env: str, how: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (ranks, seed), path in sorted(runs.items()):
        x, y = read_run(path).series(RETURN, "env_steps")
        ax.plot(x, y, color="C0" if ranks == 1 else "C1", alpha=0.8,
                label=f"{ranks} rank{'s' if ranks > 1 else ''}" if seed == min(s for _, s in runs) else None)  # fmt: skip
    ax.set_xlabel("env steps (all ranks)")
    ax.set_ylabel("mean return (last 100 episodes)")
    ax.set_title(f"{env}: 1 rank vs 2 data-parallel ranks, {how}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"distributed_{env}.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--targets", type=float, nargs="+", default=[200.0, 475.0])
    parser.add_argument("--train_dir", type=Path, default=Path("train_dir/distributed_bench"))
    parser.add_argument("--out", type=Path, default=Path("docs"))
    parser.add_argument(
        "--per_rank_batch",
        action="store_true",
        help="every rank collects the whole batch (default: the ranks share it)",
    )
    parser.add_argument(
        "--micro_only", action="store_true", help="only time an SGD step and an all-reduce"
    )
    parser.add_argument("extra", nargs="*", help="more `sampleforge train` flags, after --")
    args = parser.parse_args()
    batch = make_config(env=args.env).batch_size
    if args.micro_only:
        print(run_ranks(_time_step_and_allreduce, 2, args.env, 200)[0])
        return
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[tuple[int, int], Path] = {}
    rows = []
    for seed in args.seeds:
        for ranks in (1, 2):
            per_rank = batch if args.per_rank_batch else batch // ranks
            path = _train(ranks, args.env, args.steps, seed, args.train_dir, per_rank, args.extra)
            runs[(ranks, seed)] = path
            rows.append({"ranks": ranks, "seed": seed, **_measure(path, args.targets)})
            print(rows[-1], flush=True)
    with open(args.out / f"distributed_{args.env}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    how = "each rank the whole batch" if args.per_rank_batch else "the same batch per SGD step"
    _plot(runs, args.out, args.env, how)
    for ranks in (1, 2):
        mine = [r for r in rows if r["ranks"] == ranks]
        line = f"{ranks} rank(s): median fps {statistics.median(r['fps'] for r in mine):,.0f}"
        for t in args.targets:
            reached = [r[f"steps_to_{t:g}"] for r in mine if r[f"steps_to_{t:g}"] is not None]
            line += f"; to {t:g}: {len(reached)}/{len(mine)} runs"
            if reached:
                line += f", median {statistics.median(reached):,.0f} steps"
        print(line)
    share = statistics.median(r["allreduce_share"] for r in rows if r["ranks"] == 2)
    print(
        f"all-reduce share of the learner's training time in the 2-rank runs (median; waiting "
        f"for the other rank, which shares these cores, included): {share:.1%}"
    )
    micro = run_ranks(_time_step_and_allreduce, 2, args.env, 200)[0]
    alone = micro["allreduce_sec"] / (micro["allreduce_sec"] + micro["sgd_step_sec"])
    print(
        f"an SGD step alone: {micro['sgd_step_sec'] * 1e3:.2f} ms; an all-reduce of its "
        f"{micro['gradient_bytes'] / 1e3:,.0f} KB of gradients on loopback: "
        f"{micro['allreduce_sec'] * 1e3:.3f} ms, {alone:.1%} of the step with it"
    )
    print(
        f"projected throughput of 2 machines over 1 (learner-bound, from the all-reduce share "
        f"measured alone): {projection(alone):.2f}x; from the runs' share: "
        f"{projection(share):.2f}x"
    )


if __name__ == "__main__":
    main()
