"""Learning curves with the family defaults: mean return against frames and wall time.

    python benchmarks/learning_curves.py --env atari_breakout --seeds 1 2 3 --frames 10000000
    python benchmarks/learning_curves.py --env atari_breakout --seeds 1 --frames 2000000
    python benchmarks/learning_curves.py --env HalfCheetah-v5 --seeds 1 2 3 --frames 1000000
    python benchmarks/learning_curves.py --env atari_pong --seeds 2 --minutes 100 --resume
    python benchmarks/learning_curves.py --env atari_pong --algorithm pqn --seeds 1
    python benchmarks/learning_curves.py --env atari_pong --algorithm pqn --seeds 1 \
        --peer sb3_dqn --peer_minutes 60
    python benchmarks/learning_curves.py --env atari_pong --algorithm pqn --seeds 1 \
        --set learner_precision=bfloat16 --set num_epochs=4 --train_dir runs/pqn_bf16

Each seed trains `sampleforge train --env ENV --algorithm ALGORITHM` with nothing but the seed
and the budget given (the env family's settings for that algorithm, and any `--set`), one after
another on the whole machine. Prints, per seed, the frames and wall time at which the mean return (last 100
episodes) first reached each target (default: the references' returns), and draws both curves
into `--out/<env>[_<algorithm>]_curves.png` next to the reference points below, with the curves'
data in the `.csv` beside it: committed with the plot, it redraws it after the runs' folders are
gone (`--plot_only --also docs/<that>.csv`). With `--peer sb3_dqn` (Atari), Stable-Baselines3's
DQN with RL Zoo's settings then runs each seed in its own virtualenv for at most `--peer_minutes`
(`benchmarks/atari_peer.py`; in chunks of `--peer_chunk_minutes` continued by `--resume`),
and is timed and drawn beside ours.
"""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from atari_peer import read_reports, reports_path, run_sb3_dqn

from sampleforge.cli.signals import exit_code_of
from sampleforge.components.runner import Runner
from sampleforge.config import make_config
from sampleforge.telemetry.learning_curves import (
    RETURN,
    Run,
    first_reach,
    read_curves,
    read_run,
    write_curves,
)


@dataclass(frozen=True)
class Reference:
    """Published or measured returns of another system: (frames, return, wall seconds or
    None) points."""

    label: str
    marker: str
    points: tuple[tuple[float, float, float | None], ...]


# Sample Factory 2.1.1 with its own Atari example settings, run on this 2-core machine for
# issue 13 (16 SGD steps per 1,024 samples; the atari family makes 8): wall times are the frames
# over its measured 952 frames/s, except the 21 minutes to 20.3, which was timed.
_SF_BREAKOUT = Reference(
    "Sample Factory 2.1.1, the issue's run (2 cores)",
    "k^",
    (
        (470_000, 10.2, 470_000 / 952),
        (1_310_000, 20.3, 21 * 60),
        (2_000_000, 24.9, 2_000_000 / 952),
    ),
)
# The same with seed 2 (2026-11-26: `python -m sf_examples.atari.train_atari
# --env=atari_breakout --serial_mode=True --num_workers=2 --num_envs_per_worker=4 --device=cpu
# --seed=2`), on a later 2-core machine that ran it at 720-755 frames/s: where its mean true game
# return (`avg_RecordEpisodeStatistics_reward`) first reached 10, 15, 20 and 25, timed.
_SF_BREAKOUT_SEED2 = Reference(
    "Sample Factory 2.1.1 seed 2, a later 2-core machine",
    "kv",
    (
        (430_000, 10.0, 8.6 * 60),
        (730_000, 15.0, 15.7 * 60),
        (1_500_000, 20.0, 34.7 * 60),
        (1_820_000, 25.0, 43.7 * 60),
    ),
)

# The same with seed 1 (2026-11-28, `--seed=1 --train_for_env_steps=2000000`, then resumed to
# 2.86M frames), on the fast 2-core machine of the family's 10M-frame Breakout runs, which ran it
# at 1,461-1,486 frames/s: 15.1 at 2M frames (22.9 min), so the time to 20 spans the resume (both
# start-ups included); the mean over the last 100 episodes starts afresh at the resume.
_SF_BREAKOUT_SEED1_FAST = Reference(
    "Sample Factory 2.1.1 seed 1, the fast 2-core machine",
    "k<",
    (
        (560_000, 10.0, 6.6 * 60),
        (1_690_000, 15.0, 19.4 * 60),
        (2_330_000, 20.0, 26.5 * 60),
    ),
)


def _cleanrl(script: str, frames: float, score: float) -> Reference:
    return Reference(f"CleanRL {script}, published", "rs", ((frames, score, None),))


# CleanRL's published final returns (vwxyzjn/cleanrl, docs/rl-algorithms/ppo.md): ppo_atari.py
# after 10M agent steps, which its 4-frame skip makes 40M frames (BreakoutNoFrameskip-v4 414.66
# +- 28.09, PongNoFrameskip-v4 20.36 +- 0.20); ppo_continuous_action.py at 1M steps of the v2
# tasks, which skip no frames (HalfCheetah 1822.82 +- 928.11, Hopper 2231.12 +- 656.72,
# Walker2d 3050.09 +- 1136.21).
# Sample Factory 2 on defend_the_center: the best mean training return a run saved, read from
# its checkpoint's name on huggingface.co (best_<policy version>_<frames>_reward_<return>.pth),
# so the same measure as ours. A Hugging Face Deep RL course run to 10M frames, with turning and
# attacking as two heads (execbat/rl_course_vizdoom_doom_defend_the_center), and one of the
# authors' runs, with 1 + 3 flat actions as ours (edbeeching/doom_defend_the_center_flat_actions_1111).
_SF_DEFEND_THE_CENTER = [
    Reference("Sample Factory 2, HF course run, best", "k^", ((9_576_448, 17.33, None),)),
    Reference("Sample Factory 2, authors' run, best", "kv", ((3_708_043_264, 24.94, None),)),
]

REFERENCES: dict[str, list[Reference]] = {
    "atari_breakout": [
        _SF_BREAKOUT,
        _SF_BREAKOUT_SEED2,
        _SF_BREAKOUT_SEED1_FAST,
        _cleanrl("ppo_atari.py", 40e6, 414.66),
    ],
    "atari_pong": [_cleanrl("ppo_atari.py", 40e6, 20.36)],
    "HalfCheetah-v5": [_cleanrl("ppo_continuous_action.py", 1e6, 1822.82)],
    "Hopper-v5": [_cleanrl("ppo_continuous_action.py", 1e6, 2231.12)],
    "Walker2d-v5": [_cleanrl("ppo_continuous_action.py", 1e6, 3050.09)],
    "doom_defend_the_center": _SF_DEFEND_THE_CENTER,
}
# The other algorithms' published figures, by (env, algorithm). PQN: the final returns issue 37
# cites for CleanRL's pqn_atari_envpool.py (Gallici et al. 2024), after 10M agent steps (40M
# frames). The replay family: CleanRL's dqn_atari.py after 10M agent steps (docs/rl-algorithms/
# dqn.md: Pong 20.25 +- 0.41, Breakout 366.928 +- 39.89); its rainbow_atari.py publishes no
# Pong or Breakout figure.
_CLEANRL_DQN = {
    "atari_pong": _cleanrl("dqn_atari.py", 40e6, 20.25),
    "atari_breakout": _cleanrl("dqn_atari.py", 40e6, 366.928),
}


def _first_reaches(
    label: str, marker: str, points: tuple[tuple[float, float, float], ...]
) -> Reference:
    """A run of ours drawn as the points where its mean return first reached each target:
    `points` are (target, millions of frames, minutes), as a note recorded them."""
    return Reference(
        f"{label} (run folder gone)",
        marker,
        tuple((frames * 1e6, score, minutes * 60) for score, frames, minutes in points),
    )


# Runs of ours whose folders went with their session's machine, before the curves were kept
# beside each plot: what the notes recorded (the tables in docs/off_policy.md). PQN on Pong
# with the defaults, seeds 1 and 2; Rainbow on Pong with RL Zoo's replay and the lean learner
# settings, seeds 1 and 2 (both 2026-11-30).
_PQN_PONG_SEEDS_1_2 = [
    _first_reaches(
        "sampleforge PQN seed 1, first reaches (2026-11-30)",
        "C7o",
        ((-10, 3.92, 24.2), (0, 6.72, 41.7), (10, 9.44, 58.8), (14, 9.83, 61.3), (16, 10.01, 62.2)),
    ),
    _first_reaches(
        "sampleforge PQN seed 2, first reaches (2026-11-30)",
        "C8D",
        (
            (-10, 7.44, 48.8),
            (0, 8.55, 55.8),
            (10, 9.09, 59.3),
            (14, 9.34, 60.8),
            (16, 9.49, 61.8),
            (18, 9.81, 63.8),
        ),
    ),
]
_RAINBOW_PONG_SEEDS_1_2 = [
    _first_reaches(
        "sampleforge Rainbow seed 1, first reaches (2026-11-30)",
        "C7o",
        (
            (-18, 1.87, 63.1),
            (-15, 2.00, 67.6),
            (-12, 2.24, 76.6),
            (-10, 2.43, 83.1),
            (0, 3.13, 107.6),
            (10, 3.73, 129.2),
            (18, 4.88, 167.6),
        ),
    ),
    _first_reaches(
        "sampleforge Rainbow seed 2, first reaches (2026-11-30)",
        "C8D",
        (
            (-18, 1.63, 59.1),
            (-15, 1.92, 70.1),
            (-12, 2.15, 79.1),
            (-10, 2.30, 85.1),
            (0, 3.27, 116.7),
            (10, 4.97, 165.0),
        ),
    ),
]
# This project's APPO (the atari family's defaults) on the same env, seed 1 of the 10M-frame
# runs in docs/benchmarks.md (2026-11-28), so that a value method's plot shows where the
# on-policy line stands (its first reaches of the targets of those tables).
_APPO_FAMILY = {
    "atari_breakout": _first_reaches(
        "sampleforge APPO, atari family, seed 1 (2026-11-28)",
        "k*",
        (
            (10, 0.49, 2.0),
            (20, 1.26, 5.0),
            (25, 1.42, 5.5),
            (60, 4.30, 13.5),
            (100, 6.62, 20.1),
            (200, 8.80, 26.1),
        ),
    ),
    "atari_pong": _first_reaches(
        "sampleforge APPO, atari family, seed 1 (2026-11-28)",
        "k*",
        ((0, 1.61, 6.0), (10, 1.97, 7.0), (18, 2.50, 8.5), (19, 2.85, 9.5), (20, 5.85, 18.1)),
    ),
}
ALGORITHM_REFERENCES: dict[tuple[str, str], list[Reference]] = {
    ("atari_pong", "pqn"): [_cleanrl("pqn_atari_envpool.py", 40e6, 20.5), *_PQN_PONG_SEEDS_1_2],
    ("atari_breakout", "pqn"): [_cleanrl("pqn_atari_envpool.py", 40e6, 385.0)],
    ("atari_pong", "dqn"): [_CLEANRL_DQN["atari_pong"]],
    ("atari_breakout", "dqn"): [_CLEANRL_DQN["atari_breakout"]],
    ("atari_pong", "rainbow"): [_CLEANRL_DQN["atari_pong"], *_RAINBOW_PONG_SEEDS_1_2],
    ("atari_breakout", "rainbow"): [_CLEANRL_DQN["atari_breakout"]],
}


def references_of(env: str, algorithm: str) -> list[Reference]:
    """The reference points drawn next to `algorithm`'s runs on `env`."""
    if algorithm == "appo":
        return REFERENCES.get(env, [])
    appo = [_APPO_FAMILY[env]] if env in _APPO_FAMILY else []
    return ALGORITHM_REFERENCES.get((env, algorithm), []) + appo


def run_name(env: str, algorithm: str, seed: int) -> str:
    """The experiment folder of one seed (APPO's runs keep their older, shorter names)."""
    return f"{env}_seed{seed}" if algorithm == "appo" else f"{env}_{algorithm}_seed{seed}"


def train_seed(
    env: str,
    algorithm: str,
    seed: int,
    frames: int,
    minutes: float | None,
    train_dir: Path,
    resume: bool,
    settings: dict[str, str],
) -> Path:
    cfg = make_config(
        **settings,
        env=env,
        algorithm=algorithm,
        seed=seed,
        train_dir=str(train_dir),
        experiment=run_name(env, algorithm, seed),
        restart_behavior="resume" if resume else "overwrite",
        train_for_env_steps=frames,
        stop_at_mean_return=math.inf,
        train_for_seconds=None if minutes is None else minutes * 60,
        report_every_sec=30,
    )
    with Runner(cfg) as runner:
        runner.train()
        if runner.stop_signal is not None:  # Ctrl-C or SIGTERM ends the benchmark, not one seed
            print(f"interrupted in seed {seed}: its run is in {runner.exp.path}", file=sys.stderr)
            raise SystemExit(exit_code_of(runner.stop_signal))
        return runner.exp.path


def plot(
    env: str,
    runs: dict[str, Run],
    output: Path,
    title: str | None = None,
    references: list[Reference] | None = None,
    peers: dict[str, list[dict]] | None = None,
) -> Path:
    """Mean return against frames and wall time of each run in `runs` ({label: run}), next to
    `references` (default: this env's in REFERENCES) and the `peers`' reports ({label:
    [{frames, wall_seconds, mean_return}]}); writes `output`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    by_frames, by_time = figure.subplots(1, 2)
    most_frames = 0.0
    for index, (label, run) in enumerate(runs.items()):
        for ax, x in ((by_frames, "env_steps"), (by_time, "wall_time")):
            xs, ys = run.series(RETURN, x)
            if x == "env_steps" and len(xs):
                most_frames = max(most_frames, float(xs[-1]))
            ax.plot(
                xs / (1e6 if x == "env_steps" else 60.0),
                ys,
                color=f"C{index}",
                label=f"sampleforge, {label}",
            )
    for index, (label, rows) in enumerate((peers or {}).items()):
        for ax, x, scale in ((by_frames, "frames", 1e6), (by_time, "wall_seconds", 60.0)):
            ax.plot(
                [r[x] / scale for r in rows],
                [r["mean_return"] for r in rows],
                color=f"C{len(runs) + index}",
                linestyle="--",
                label=label,
            )
    for ref in REFERENCES.get(env, []) if references is None else references:
        # A point far beyond the runs would only squash their curves: the legend names it.
        points = [p for p in ref.points if p[0] <= 1.2 * most_frames]
        beyond = [p for p in ref.points if p[0] > 1.2 * most_frames]
        for frames, score, seconds in points:
            by_frames.plot(frames / 1e6, score, ref.marker)
            if seconds is not None:
                by_time.plot(seconds / 60.0, score, ref.marker)
        off_axis = "".join(f"; {s:g} at {f / 1e6:g}M frames, off the axis" for f, s, _ in beyond)
        # Wrapped: one long legend line would squeeze the axes to a sliver.
        by_frames.plot([], [], ref.marker, label=textwrap.fill(ref.label + off_axis, 60))
        if any(seconds is not None for _, _, seconds in points):
            by_time.plot([], [], ref.marker, label=textwrap.fill(ref.label, 60))
    by_frames.set_xlabel("frames (millions)")
    by_time.set_xlabel("wall time (minutes)")
    for ax in (by_frames, by_time):
        ax.set_ylabel("mean return, last 100 episodes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", framealpha=0.5)  # points behind it stay visible
    figure.suptitle(title or f"{env}: family defaults")
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=100)
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="atari_breakout")
    parser.add_argument("--algorithm", default="appo", help="any of `sampleforge train`'s")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--frames", type=int, default=10_000_000)
    parser.add_argument("--minutes", type=float, default=None, help="cap on each run")
    parser.add_argument(
        "--targets",
        type=float,
        nargs="+",
        default=None,
        help="returns to time (default: the references' returns)",
    )
    parser.add_argument("--train_dir", type=Path, default=Path("train_dir/learning_curves"))
    parser.add_argument("--out", type=Path, default=Path("docs"))
    parser.add_argument(
        "--plot_only", action="store_true", help="redraw from the runs already in --train_dir"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the runs in --train_dir from their last checkpoints, so a 10M-frame "
        "run can be done in --minutes chunks (wall times add up over the chunks)",
    )
    parser.add_argument(
        "--also",
        type=Path,
        nargs="+",
        default=[],
        help="run folders from elsewhere (an earlier family, a variant), or a curves CSV this "
        "script wrote beside a plot (its runs' folders gone), to time and draw too",
    )
    parser.add_argument(
        "--title",
        default=None,
        help="the plot's title (default: the env, the algorithm and the --set settings), for "
        "a plot of runs with different settings",
    )
    parser.add_argument("--peer", choices=["none", "sb3_dqn"], default="none")
    parser.add_argument(
        "--peer_minutes", type=float, default=60.0, help="wall-time cap on each peer run"
    )
    parser.add_argument(
        "--peer_chunk_minutes",
        type=float,
        default=None,
        help="wall time of this call's chunk of each peer run (with --resume, the next "
        "call continues it; default: the whole run)",
    )
    parser.add_argument(
        "--peer_venv", type=Path, default=Path.home() / ".cache/sampleforge-peers/sb3"
    )
    parser.add_argument(
        "--peer_dir",
        type=Path,
        default=None,
        help="where the peer's runs are (default: --train_dir), e.g. runs of "
        "benchmarks/atari_peer.py to draw beside ours with --plot_only",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting on top of the family's (any `sampleforge train` flag), repeatable",
    )
    args = parser.parse_args()
    settings = dict(_key_value(item, parser) for item in args.set)
    paths = [args.train_dir / run_name(args.env, args.algorithm, seed) for seed in args.seeds]
    if not args.plot_only:
        paths = [
            train_seed(
                args.env,
                args.algorithm,
                seed,
                args.frames,
                args.minutes,
                args.train_dir,
                args.resume,
                settings,
            )
            for seed in args.seeds
        ]
    if args.plot_only:
        for path in [p for p in paths if not p.is_dir()]:
            print(f"no run {path}: not drawn (a curves CSV given to --also can stand for it)")
        paths = [path for path in paths if path.is_dir()]
    runs = {f"{path.parent.name}/{path.name}": read_run(path) for path in paths}
    for also in args.also:
        runs.update(read_curves(also) if also.is_file() else {also.name: read_run(also)})
    references = references_of(args.env, args.algorithm)
    targets = args.targets or sorted({score for ref in references for _, score, _ in ref.points})
    peers = {}
    if args.peer != "none":
        for seed in args.seeds:
            csv_path = reports_path(args.peer_dir or args.train_dir, args.env, seed)
            if args.plot_only and not csv_path.exists():
                print(f"no peer run for seed {seed} ({csv_path}): not drawn")
                continue
            if not args.plot_only:
                run_sb3_dqn(
                    args.env,
                    seed,
                    args.frames,
                    args.peer_minutes,
                    csv_path,
                    args.peer_venv,
                    args.peer_chunk_minutes,
                    args.resume,
                )
            peers[f"SB3 DQN (RL Zoo), seed {seed}"] = read_reports(csv_path)
    for label, run in runs.items():
        print(f"{label}: " + _reached([first_reach(run, t) for t in targets], targets))
    for label, rows in peers.items():
        print(f"{label}: " + _reached([_peer_reach(rows, t) for t in targets], targets))
        if rows:
            last = rows[-1]
            print(
                f"  at its cap: {last['mean_return']:.2f} after {last['frames'] / 1e6:.2f}M "
                f"frames, {last['wall_seconds'] / 60:.1f} min"
            )
    stem = args.env if args.algorithm == "appo" else f"{args.env}_{args.algorithm}"
    title = args.title or f"{args.env}, {args.algorithm}: family defaults"
    if settings and not args.title:
        title += " with " + ", ".join(f"{k} {v}" for k, v in settings.items())
    print(
        f"wrote {plot(args.env, runs, args.out / f'{stem}_curves.png', title, references, peers)}"
    )
    print(f"wrote {write_curves(runs, args.out / f'{stem}_curves.csv')}")


def _key_value(item: str, parser: argparse.ArgumentParser) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        parser.error(f"--set {item!r}: expected KEY=VALUE, e.g. learner_precision=bfloat16")
    return key, value


def _reached(reaches: list[tuple[float, float] | None], targets: list[float]) -> str:
    """'target: frames, minutes' of each target, from its (frames, seconds) or None."""
    cells = []
    for target, reached in zip(targets, reaches):
        cells.append(
            f"{target:g}: "
            + (
                "not reached"
                if reached is None
                else f"{reached[0] / 1e6:.2f}M frames, {reached[1] / 60:.1f} min"
            )
        )
    return "; ".join(cells)


def _peer_reach(rows: list[dict], target: float) -> tuple[float, float] | None:
    """(frames, wall seconds) of a peer's first report at or above `target`, or None."""
    for row in rows:
        if row["mean_return"] >= target:
            return row["frames"], row["wall_seconds"]
    return None


if __name__ == "__main__":
    main()
