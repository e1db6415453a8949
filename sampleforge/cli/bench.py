"""`sampleforge bench`: training throughput against pure simulation and the compute limit.

    sampleforge bench --env CartPole-v1
    sampleforge bench --env atari_breakout --num_envs_per_worker 16 --json
    sampleforge bench --env atari_breakout --sweep --sweep_envs 8,32,128,512,1024

Takes every training flag (the system is measured as `train` would run it). See
`sampleforge/bench/report.py` for the JSON keys. Ctrl-C or SIGTERM stops it within seconds
(exit 130 or 143), its throwaway experiment folder removed.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from sampleforge.cli.signals import stop_on_signals
from sampleforge.config.cli_args import add_config_arguments, add_switch, config_from_args

HELP = "Measure training FPS against pure simulation and the machine's compute limit."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("benchmark")
    group.add_argument(
        "--duration",
        type=float,
        default=60.0,
        help="seconds of steady-state training measured (default: 60)",
    )
    group.add_argument(
        "--warmup",
        type=float,
        default=15.0,
        help="seconds of training before measuring (default: 15)",
    )
    add_switch(group, "--json", help="also print one JSON object")
    group.add_argument(
        "--cores",
        type=int,
        default=os.cpu_count(),
        help="cores for pure simulation and the compute limit (default: all)",
    )
    add_switch(group, "--sweep", help="repeat training over total env counts; writes CSV and PNG")
    group.add_argument(
        "--sweep_envs",
        default="8,16,32,64,128,256,512,1024",
        help="total env counts of the sweep, comma separated",
    )
    add_switch(
        group,
        "--tune",
        help="try rollout workers x envs per worker x splits for this env and print the fastest",
    )
    group.add_argument(
        "--out",
        default="bench_results",
        help="folder for the sweep's CSV and PNG (default: bench_results)",
    )
    add_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from sampleforge.comms.interrupts import remove_at_hard_exit

    base = _bench_config(args)
    remove_at_hard_exit(base.train_dir)  # a second Ctrl-C skips the `finally` below
    try:
        import sampleforge.bench.measure  # noqa: F401 - the heavy imports, before signals act

        stop_on_signals()  # Ctrl-C or SIGTERM ends any measurement from now on
        if args.sweep:
            return _sweep(args, base)
        if args.tune:
            return _tune(args, base)
        return _measure(args, base)
    finally:
        shutil.rmtree(base.train_dir, ignore_errors=True)  # the throwaway experiments


def _measure(args: argparse.Namespace, base) -> int:
    """The three measurements and their ratios (the default mode)."""
    from sampleforge.bench.machine_load import MachineLoad
    from sampleforge.bench.measure import compute_costs, pure_simulation_fps, training_fps
    from sampleforge.bench.report import BenchReport
    from sampleforge.telemetry.bottleneck import bottleneck

    frameskip = _frameskip(base.env)
    print(f"measuring pure simulation of {base.env} on {args.cores} cores ...", file=sys.stderr)
    with MachineLoad() as pure_load:
        pure = pure_simulation_fps(
            base.env,
            processes=args.cores,
            envs_per_process=base.envs_per_split,
            seconds=min(10.0, args.duration),
        )
    print("measuring training ...", file=sys.stderr)
    train = training_fps(base, warmup_sec=args.warmup, measure_sec=args.duration)
    batch = max(1, round(train.mean_inference_batch)) if train.mean_inference_batch > 0 else 1
    print(f"measuring per-sample costs (inference batch {batch}) ...", file=sys.stderr)
    with MachineLoad() as costs_load:
        costs = compute_costs(base, batch)
    stats = train.learner_stats
    replay = _replay_speed(base, seconds=min(1.0, args.duration / 10))
    report = BenchReport(
        env=base.env,
        num_envs=base.num_workers * base.num_envs_per_worker,
        cores=args.cores,
        frameskip=frameskip,
        pure_sim_fps=pure,
        compute_limit_fps=costs.limit_fps(args.cores, frameskip),
        learner_limit_fps=min(
            costs.limit_fps(args.cores, frameskip),
            costs.learner_limit_fps(base.num_policies, frameskip),
        ),
        train_fps=train.fps,
        mean_policy_lag=train.mean_policy_lag,
        # The learning work per sample as the family's learner does it (a replay's learner
        # updates by the replay ratio, not by epochs of datasets).
        sgd_steps_per_1000_samples=1000.0 * costs.sgd_steps_per_sample,
        inference_batch_size=train.mean_inference_batch,
        costs_us={
            "env_step": costs.env_step * 1e6,
            "inference": costs.inference * 1e6,
            "learner": costs.learner * 1e6,
            "sgd_step": costs.sgd_step * 1e6,
        },
        memory_mb=train.memory_mb,
        bottleneck=bottleneck(train.perf),
        perf=train.perf,
        load_pure_sim=pure_load.median,
        load_costs=costs_load.median,
        device=costs.device,
        sgd_steps_per_sec=train.sgd_steps_per_sec,
        transitions_per_sec=train.transitions_per_sec,
        samples_per_insert=stats.get("replay/samples_per_insert"),
        replay_bytes_per_transition=stats.get("replay/bytes_per_transition"),
        replay_size=stats.get("replay/size"),
        replay_speed=None if replay is None else asdict(replay),
        actor_cores=train.actor_cores,
        learner_cores=train.learner_cores,
    )
    print("\n".join(report.lines()))
    if args.json:
        print(report.to_json())
    return 0


def _replay_speed(cfg, seconds: float):
    """The replay's own figures (`bench/replay_speed.py`, each speed timed `seconds` a run)
    for an algorithm with a replay, on `cfg`'s env; None for one without, or for an env the
    random-play filler cannot step."""
    from sampleforge.bench.replay_speed import replay_speed
    from sampleforge.config.algorithms import uses_replay
    from sampleforge.envs.envpool_env import is_envpool_spec
    from sampleforge.envs.registry import resolve_env

    if not uses_replay(cfg.algorithm):
        return None
    spec = resolve_env(cfg.env)
    if spec.multi_agent or is_envpool_spec(spec):
        print(
            "replay figures not measured: the random-play filler steps single-agent Gymnasium "
            f"envs, and {cfg.env} is {'multi-agent' if spec.multi_agent else 'an EnvPool batch'}",
            file=sys.stderr,
        )
        return None
    print("measuring the replay (filled by random play, one thread) ...", file=sys.stderr)
    return replay_speed(cfg, seconds=seconds)


def _bench_config(args: argparse.Namespace):
    cfg = config_from_args(args)
    # A throwaway experiment: a benchmark never resumes or touches a user's run. It measures
    # the settings' steady state, whose work per sample the report quotes: the extra epochs
    # of a run's first frames (early_num_epochs) are left out.
    return cfg.replace(
        early_num_epochs=None,
        train_dir=tempfile.mkdtemp(prefix="sampleforge_bench_"),
        restart_behavior="overwrite",
        stop_at_mean_return=float("inf"),
        train_for_env_steps=10**12,
        save_every_sec=10**9,
        tensorboard=False,
    )


def _frameskip(env: str) -> int:
    from sampleforge.envs.registry import env_info

    return env_info(env).frameskip


def _sweep(args: argparse.Namespace, base) -> int:
    from sampleforge.bench.measure import training_fps

    _check_plotting()  # before the sweep, not after minutes of it
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for total in [int(x) for x in args.sweep_envs.split(",")]:
        per_worker = max(base.worker_num_splits, total // base.num_workers)
        per_worker -= per_worker % base.worker_num_splits
        cfg = base.replace(num_envs_per_worker=per_worker)
        m = training_fps(cfg, warmup_sec=args.warmup, measure_sec=args.duration)
        envs = per_worker * cfg.num_workers
        rows.append(
            {
                "num_envs": envs,
                "train_fps": round(m.fps, 1),
                "mean_policy_lag": round(m.mean_policy_lag, 2),
                "memory_mb": round(m.memory_mb, 1),
                "memory_mb_per_env": round(m.memory_mb / envs, 3),
            }
        )
        print(
            f"{envs:>6} envs: {m.fps:>10,.0f} frames/s  {cfg.sgd_steps_per_1000_samples:.2f} "
            f"SGD steps/1k samples  lag {m.mean_policy_lag:5.1f}  memory "
            f"{m.memory_mb:8,.0f} MB ({m.memory_mb / envs:.2f} MB/env)",
            flush=True,
        )
    csv_path = out / f"sweep_{base.env}.csv"
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    png_path = _plot_sweep(rows, base.env, out / f"sweep_{base.env}.png")
    print(f"wrote {csv_path} and {png_path}")
    return 0


def _tune(args: argparse.Namespace, base) -> int:
    """Short training runs over rollout workers, envs per worker and splits; prints the
    fastest. On a CPU machine the best split of the cores between envs, inference and learning
    depends on the env and the model (atari_breakout on 2 cores: 1 worker, CartPole: 2)."""
    from sampleforge.bench.measure import training_fps

    results = []
    for workers in sorted({1, max(1, args.cores // 2), args.cores}):
        for per_worker in (8, 16, 32, 64):
            for splits in (1, 2):
                cfg = base.replace(
                    num_workers=workers, num_envs_per_worker=per_worker, worker_num_splits=splits
                )
                m = training_fps(cfg, warmup_sec=args.warmup, measure_sec=args.duration)
                results.append((m.fps, workers, per_worker, splits, m.mean_policy_lag))
                print(
                    f"  {workers} worker(s) x {per_worker:>3} envs, {splits} split(s): "
                    f"{m.fps:>10,.0f} frames/s ({cfg.sgd_steps_per_1000_samples:.2f} SGD "
                    f"steps/1k samples), lag {m.mean_policy_lag:.1f}",
                    flush=True,
                )
    fps, workers, per_worker, splits, lag = max(results)
    print(
        f"fastest: --num_workers {workers} --num_envs_per_worker {per_worker} "
        f"--worker_num_splits {splits} ({fps:,.0f} frames/s, policy lag {lag:.1f}); check "
        "that the lag suits learning before adopting it"
    )
    return 0


def _check_plotting() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit(
            "bench --sweep draws a PNG and needs matplotlib: pip install matplotlib"
        ) from None


def _plot_sweep(rows: list[dict], env: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = [r["num_envs"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(envs, [r["train_fps"] for r in rows], marker="o")
    ax1.set(xscale="log", xlabel="environments", ylabel="training frames/s", title=env)
    ax2.plot(envs, [r["memory_mb_per_env"] for r in rows], marker="o", color="tab:orange")
    ax2.set(xscale="log", xlabel="environments", ylabel="MB per env", title="memory per env")
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)  # from zero: a small dip should look small
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
