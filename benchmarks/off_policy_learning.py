"""Deterministic evaluations of an off-policy algorithm (value-based or continuous control)
over env steps and wall time, next to a peer.

    python benchmarks/off_policy_learning.py --algorithm dqn --env CartPole-v1 --steps 100000
    python benchmarks/off_policy_learning.py --algorithm qrdqn --env LunarLander-v3 --peer sb3
    python benchmarks/off_policy_learning.py --algorithm sac --env Pendulum-v1 --steps 20000 \
        --eval_every 2000 --peer sb3
    python benchmarks/off_policy_learning.py --algorithm sac --env HalfCheetah-v5 \
        --steps 1000000 --seconds 1800 --eval_every 10000 --seeds 1 --peer sb3
    python benchmarks/off_policy_learning.py --algorithm pqn --env CartPole-v1 --steps 500000 \
        --stop_at_target --peer cleanrl --cleanrl_script cleanrl/cleanrl/pqn.py

Each seed trains sampleforge's algorithm with its env family's settings (plus `--set k=v`),
`--eval_every` env steps at a time through the Python API, and after each chunk plays
`--eval_episodes` deterministic episodes (greedy for a Q-network, the actor's mean for
continuous control, as RL Zoo's evaluation does). Wall time counts training only (evaluations
excluded), processes' start included; `--seconds` ends a run at that much training time
(equal wall time for both systems), and `--stop_at_target` at its first evaluation at or above
the target. With `--peer sb3`, Stable-Baselines3 (or sb3-contrib for QR-DQN) runs the same
schedule with RL Zoo's tuned settings for the env, in a virtualenv of its own that this script
creates (`--peer_venv`), one run after the other on the same machine; it is never a dependency
of sampleforge. With `--peer cleanrl` (PQN), CleanRL's `pqn.py` does, unchanged, with its own
settings (`benchmarks/cleanrl_peer.py`).

Writes `<out>/<algorithm>_<env>.csv` (system, seed, env_steps, wall_seconds, eval_mean), again
after each of sampleforge's evaluations so that a killed run leaves what it measured, and a PNG
of both curves, and prints, per system, the median env steps and wall time to the first
evaluation at or above `--target` (default: the env's reward threshold) and the final and best
evaluations. Ctrl-C or SIGTERM ends the run at once and still writes the CSV, the report and
the plot of the evaluations made so far.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
from cleanrl_peer import run_cleanrl_pqn
from peer_process import peer_python, run_peer_job

import sampleforge
from sampleforge.cli.signals import exit_code_of

# RL Zoo's tuned settings (DLR-RM/rl-baselines3-zoo, hyperparams/dqn.yml and qrdqn.yml at
# 22e3ff2, 2026-04) and its published scores (benchmark.md: 100K steps, deterministic).
_ZOO: dict[tuple[str, str], dict[str, Any]] = {
    ("dqn", "CartPole-v1"): dict(
        learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
        gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
        exploration_fraction=0.16, exploration_final_eps=0.04, net_arch=[256, 256],
        n_timesteps=50_000,
    ),
    ("dqn", "LunarLander-v3"): dict(
        learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0,
        gamma=0.99, target_update_interval=250, train_freq=4, gradient_steps=-1,
        exploration_fraction=0.12, exploration_final_eps=0.1, net_arch=[256, 256],
        n_timesteps=100_000,
    ),
    ("dqn", "Acrobot-v1"): dict(
        learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0,
        gamma=0.99, target_update_interval=250, train_freq=4, gradient_steps=-1,
        exploration_fraction=0.12, exploration_final_eps=0.1, net_arch=[256, 256],
        n_timesteps=100_000,
    ),
    ("qrdqn", "LunarLander-v3"): dict(
        learning_rate=1.5e-3, lr_schedule="linear", batch_size=128, buffer_size=100_000,
        learning_starts=10_000, gamma=0.995, target_update_interval=1, train_freq=256,
        gradient_steps=-1, exploration_fraction=0.24, exploration_final_eps=0.18,
        net_arch=[256, 256], n_quantiles=170, n_timesteps=100_000,
    ),
    ("qrdqn", "Acrobot-v1"): dict(
        learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0,
        gamma=0.99, target_update_interval=250, train_freq=4, gradient_steps=-1,
        exploration_fraction=0.12, exploration_final_eps=0.1, net_arch=[256, 256],
        n_quantiles=25, n_timesteps=100_000,
    ),
    # hyperparams/sac.yml and td3.yml (MuJoCo: the -v4 entries; v5 has the same dynamics).
    ("sac", "Pendulum-v1"): dict(learning_rate=1e-3, n_timesteps=20_000),
    ("td3", "Pendulum-v1"): dict(
        gamma=0.98, buffer_size=200_000, learning_starts=10_000, noise_std=0.1,
        learning_rate=1e-3, net_arch=[400, 300], n_timesteps=20_000,
    ),
    ("sac", "HalfCheetah-v5"): dict(learning_starts=10_000, n_timesteps=1_000_000),
    ("td3", "HalfCheetah-v5"): dict(
        learning_starts=10_000, noise_std=0.1, n_timesteps=1_000_000
    ),
}  # fmt: skip
_ZOO_SCORES = {
    ("dqn", "CartPole-v1"): 500.0,
    ("dqn", "LunarLander-v3"): 154.4,  # published for LunarLander-v2
    ("dqn", "Acrobot-v1"): -76.6,
    ("qrdqn", "LunarLander-v3"): 70.2,
    ("qrdqn", "Acrobot-v1"): -69.1,
    ("sac", "Pendulum-v1"): -156.8,
    ("td3", "Pendulum-v1"): -151.9,
}
# The line to reach where gymnasium gives none (issue targets; RL Zoo's scores beat them).
_TARGETS = {"Pendulum-v1": -200.0}

# Runs inside the peer's virtualenv: argv[1] is a JSON job; prints one JSON line per
# evaluation. Training time excludes the evaluations.
_PEER_SCRIPT = r"""
import json, sys, time
import gymnasium as gym, torch
torch.set_num_threads(1)
job = json.loads(sys.argv[1])
import numpy as np
import stable_baselines3
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.noise import NormalActionNoise
if job["algorithm"] == "qrdqn":
    from sb3_contrib import QRDQN as Algo
else:
    Algo = getattr(stable_baselines3, job["algorithm"].upper())
s = dict(job["settings"])
s.pop("n_timesteps", None)
kwargs = {"net_arch": s.pop("net_arch")} if "net_arch" in s else {}
if "n_quantiles" in s:
    kwargs["n_quantiles"] = s.pop("n_quantiles")
if s.pop("lr_schedule", None) == "linear":
    lr = s.pop("learning_rate"); s["learning_rate"] = lambda left: left * lr
eval_env = gym.make(job["env"])
if "noise_std" in s:  # DDPG/TD3: Gaussian noise in the policy's [-1, 1] units, as RL Zoo's
    n = eval_env.action_space.shape[0]
    s["action_noise"] = NormalActionNoise(np.zeros(n), s.pop("noise_std") * np.ones(n))

class Evaluate(BaseCallback):
    def __init__(self):
        super().__init__(); self.next = job["eval_every"]; self.spent = 0.0
    def _on_step(self):
        if self.num_timesteps >= self.next:
            self.next += job["eval_every"]; t = time.perf_counter()
            mean, _ = evaluate_policy(self.model, eval_env, job["eval_episodes"], deterministic=True)
            self.spent += time.perf_counter() - t
            wall = time.perf_counter() - started - self.spent
            print(json.dumps({"env_steps": self.num_timesteps, "eval_mean": float(mean),
                              "wall_seconds": wall}), flush=True)
            return wall < job["seconds"] and (job["stop_at"] is None or mean < job["stop_at"])
        return True

started = time.perf_counter()
model = Algo("MlpPolicy", job["env"], policy_kwargs=kwargs, seed=job["seed"], verbose=0, **s)
model.learn(job["steps"], callback=Evaluate())
"""


def ours(
    algorithm: str,
    env: str,
    seed: int,
    args: argparse.Namespace,
    rows: list[dict],
    evaluated: Callable[[], None] = lambda: None,
) -> None:
    """One seed of sampleforge: appends {env_steps, wall_seconds, eval_mean} to `rows` per
    evaluation, and calls `evaluated` after each (rows gathered stay there on an interrupt)."""
    cls = {c.algorithm: c for c in _api_classes()}[algorithm]
    with tempfile.TemporaryDirectory() as train_dir:
        # This script evaluates between chunks itself: no evaluation worker beside training.
        settings = {"eval_every_env_steps": None, "stop_on": "training", **_settings(args.set)}
        with cls(env, seed=seed, train_dir=train_dir, **settings) as model:
            wall = 0.0
            while model.env_steps < args.steps and wall < args.seconds:
                t = time.perf_counter()
                summary = model.train(args.eval_every)
                wall += time.perf_counter() - t
                if summary.stopped_because == "interrupted":  # Ctrl-C or SIGTERM: all of it
                    raise SystemExit(exit_code_of(model.runner.stop_signal))
                result = model.evaluate(args.eval_episodes, seed=10_000 + seed)
                mean = statistics.fmean(result.returns)
                rows.append({"env_steps": model.env_steps, "wall_seconds": wall, "eval_mean": mean})
                print(f"  sampleforge seed {seed}: {model.env_steps:>8,} steps "
                      f"{wall:7.1f} s  deterministic {mean:8.2f}", flush=True)  # fmt: skip
                evaluated()
                if args.stop_at_target and mean >= args.target:
                    break


def peer(algorithm: str, env: str, seed: int, args: argparse.Namespace) -> list[dict]:
    """One seed of the peer (RL Zoo's settings) in its own virtualenv."""
    job = {
        "algorithm": algorithm,
        "env": env,
        "seed": seed,
        "steps": args.steps,
        "eval_every": args.eval_every,
        "eval_episodes": args.eval_episodes,
        "seconds": args.seconds,
        "stop_at": args.target if args.stop_at_target else None,
        "settings": _ZOO[(algorithm, env)],
    }
    return run_peer_job(_peer_python(Path(args.peer_venv)), _PEER_SCRIPT, job, "sb3")


def _peer_run(seed: int, args: argparse.Namespace) -> list[dict]:
    if args.peer == "sb3":
        return peer(args.algorithm, args.env, seed, args)
    return run_cleanrl_pqn(
        args.env,
        seed,
        args.steps,
        args.seconds,
        args.eval_every,
        args.eval_episodes,
        args.target if args.stop_at_target else None,
        args.cleanrl_script,
        args.cleanrl_venv,
    )


def _peer_python(venv: Path) -> Path:
    """The SB3 peer's python (SB3 and sb3-contrib, with the Box2D and MuJoCo envs)."""
    packages = ["stable-baselines3==2.9.2", "sb3-contrib==2.9.2", "box2d", "pygame", "mujoco"]
    return peer_python(venv, [*packages, "imageio", "packaging"])


def _api_classes() -> list[type]:
    return [getattr(sampleforge, name) for name in sampleforge._API_NAMES]


def _settings(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            sys.exit(f"--set {pair!r}: expected key=value")
        out[key] = json.loads(value) if value[:1] in "[{0123456789-" else value
    return out


def first_reach(rows: list[dict], target: float) -> tuple[float, float] | None:
    """(env steps, wall seconds) of the first evaluation at or above `target`, or None."""
    for r in rows:
        if r["eval_mean"] >= target:
            return r["env_steps"], r["wall_seconds"]
    return None


def report(runs: dict[str, dict[int, list[dict]]], target: float) -> None:
    for system, by_seed in runs.items():
        reached = [first_reach(rows, target) for rows in by_seed.values()]
        hit = [r for r in reached if r is not None]
        best = [max(r["eval_mean"] for r in rows) for rows in by_seed.values() if rows]
        final = [rows[-1]["eval_mean"] for rows in by_seed.values() if rows]
        line = f"{system:12} seeds {len(by_seed)}: reached {target:g} in {len(hit)}"
        if hit:
            line += (f" (median {statistics.median(s for s, _ in hit):,.0f} steps, "
                     f"{statistics.median(w for _, w in hit):.0f} s)")  # fmt: skip
        line += f"; final {_fmt(final)}; best {_fmt(best)}"
        print(line)


def _fmt(values: list[float]) -> str:
    return "/".join(f"{v:.1f}" for v in values)


def plot(runs: dict[str, dict[int, list[dict]]], target: float, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for (system, by_seed), color in zip(runs.items(), ("C0", "C1", "C2")):
        for i, rows in enumerate(by_seed.values()):
            label = system if i == 0 else None
            steps = [r["env_steps"] for r in rows]
            walls = [r["wall_seconds"] for r in rows]
            means = [r["eval_mean"] for r in rows]
            axes[0].plot(steps, means, color=color, alpha=0.8, label=label)
            axes[1].plot(walls, means, color=color, alpha=0.8, label=label)
    for ax, xlabel in zip(axes, ("env steps", "training wall seconds")):
        ax.axhline(target, color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("deterministic evaluation mean return")
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algorithm", default="dqn")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=float("inf"), help="training time cap")
    parser.add_argument("--eval_every", type=int, default=5_000)
    parser.add_argument("--eval_episodes", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--target", type=float, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--stop_at_target",
        action="store_true",
        help="end each run at its first evaluation >= target",
    )
    parser.add_argument("--peer", choices=["none", "sb3", "cleanrl"], default="none")
    parser.add_argument("--peer_venv", default=str(Path.home() / ".cache/sampleforge-peers/sb3"))
    parser.add_argument("--cleanrl_script", type=Path, help="CleanRL's cleanrl/pqn.py")
    parser.add_argument(
        "--cleanrl_venv", type=Path, default=Path.home() / ".cache/sampleforge-peers/cleanrl"
    )
    parser.add_argument("--out", default="benchmark_results")
    args = parser.parse_args()
    if args.peer == "sb3" and (args.algorithm, args.env) not in _ZOO:
        sys.exit(
            f"--peer sb3: no RL Zoo settings here for {args.algorithm} on {args.env}; "
            f"known: {', '.join(f'{a} {e}' for a, e in _ZOO)}"
        )
    if args.peer == "cleanrl" and (args.algorithm != "pqn" or args.cleanrl_script is None):
        sys.exit("--peer cleanrl: runs CleanRL's pqn.py, for --algorithm pqn with --cleanrl_script")
    if args.target is None:
        args.target = _TARGETS.get(args.env, gym.spec(args.env).reward_threshold)
    assert args.target is not None, f"{args.env} has no reward threshold: give --target"
    _settings(args.set)  # a malformed --set fails here, not as an interrupt inside a run
    peer_name = {"none": None, "sb3": "sb3 (RL Zoo)", "cleanrl": "cleanrl pqn.py"}[args.peer]
    runs: dict[str, dict[int, list[dict]]] = {"sampleforge": {}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{args.algorithm}_{args.env}"
    try:
        for seed in args.seeds:
            rows = runs["sampleforge"].setdefault(seed, [])
            ours(args.algorithm, args.env, seed, args, rows, lambda: write_csv(runs, out, stem))
            if peer_name is not None:
                runs.setdefault(peer_name, {})[seed] = _peer_run(seed, args)
    except (SystemExit, KeyboardInterrupt):  # Ctrl-C or SIGTERM: keep what was measured
        if any(rows for by_seed in runs.values() for rows in by_seed.values()):
            print("interrupted: the evaluations made so far", flush=True)
            write_results(runs, args, out, stem)
        raise
    write_results(runs, args, out, stem)


def write_csv(runs: dict[str, dict[int, list[dict]]], out: Path, stem: str) -> None:
    """All evaluations so far, to `<out>/<stem>.csv` (replaced whole, never half-written)."""
    part = out / f"{stem}.csv.part"
    with open(part, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["system", "seed", "env_steps", "wall_seconds", "eval_mean"])
        for system, by_seed in runs.items():
            for seed, rows in by_seed.items():
                for r in rows:
                    writer.writerow(
                        [system, seed, r["env_steps"], r["wall_seconds"], r["eval_mean"]]
                    )
    part.replace(out / f"{stem}.csv")


def write_results(
    runs: dict[str, dict[int, list[dict]]], args: argparse.Namespace, out: Path, stem: str
) -> None:
    """The CSV, the printed report and the plot."""
    write_csv(runs, out, stem)
    report(runs, args.target)
    zoo = _ZOO_SCORES.get((args.algorithm, args.env))
    if zoo is not None:
        print(
            f"RL Zoo's published score: {zoo:g} at {_ZOO[(args.algorithm, args.env)]['n_timesteps']:,} steps"
        )
    plot(runs, args.target, f"{args.algorithm} on {args.env} (deterministic, {args.eval_episodes} episodes)",
         out / f"{stem}.png")  # fmt: skip


if __name__ == "__main__":
    main()
