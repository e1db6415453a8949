"""Atari learning curves with the family defaults: return against frames and wall time.

    python benchmarks/atari_curves.py --env atari_breakout --seeds 1 2 3 --frames 10000000
    python benchmarks/atari_curves.py --env atari_breakout --seeds 1 --minutes 30   # a quick look

Each seed trains `sampleforge train --env ENV` with nothing but the seed and the budget given
(the atari family's settings), one after another on the whole machine. Prints, per seed, the
frames and wall time at which the mean return (last 100 games) first reached each target, and
draws both curves into `--out/<env>_curves.png` next to the reference points of Sample Factory
2.1.1 run on the same 2-core machine with its own Atari example settings (issue 13), whose
wall times are the frames over its measured 952 frames/s except the 21 minutes to 20.3, which
was timed. CleanRL's published `ppo_atari.py` returns at 10M frames (3 seeds, mean of the
last episodes; docs/rl-algorithms/ppo.md of vwxyzjn/cleanrl) are drawn on the frames plot.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from sampleforge.components.runner import Runner
from sampleforge.config import make_config
from sampleforge.telemetry.learning_curves import RETURN, read_run

# (frames, mean return, wall seconds) of Sample Factory 2.1.1 on this machine.
SAMPLE_FACTORY_HERE = {
    "atari_breakout": [(470_000, 10.2, 470_000 / 952), (1_310_000, 20.3, 21 * 60),
                       (2_000_000, 24.9, 2_000_000 / 952)],
}

# (frames, mean return) of CleanRL's ppo_atari.py, published (BreakoutNoFrameskip-v4 414.66 +-
# 28.09, PongNoFrameskip-v4 20.36 +- 0.20, at 10M frames).
CLEANRL_PUBLISHED = {
    "atari_breakout": (10_000_000, 414.66),
    "atari_pong": (10_000_000, 20.36),
}


def train_seed(env: str, seed: int, frames: int, minutes: float | None, train_dir: Path) -> Path:
    cfg = make_config(env=env, seed=seed, train_dir=str(train_dir),
                      experiment=f"{env}_seed{seed}", restart_behavior="overwrite",
                      train_for_env_steps=frames, stop_at_mean_return=math.inf,
                      train_for_seconds=None if minutes is None else minutes * 60,
                      report_every_sec=30)
    with Runner(cfg) as runner:
        runner.train()
        return runner.exp.path


def first_reach(path: Path, target: float) -> tuple[float, float] | None:
    """(frames, wall seconds) where the mean return first reached `target`, or None."""
    run = read_run(path)
    frames, returns = run.series(RETURN, "env_steps")
    seconds, _ = run.series(RETURN, "wall_time")
    for f, r, s in zip(frames, returns, seconds):
        if r >= target:
            return float(f), float(s)
    return None


def plot(env: str, paths: list[Path], output: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    by_frames, by_time = figure.subplots(1, 2)
    most_frames = 0.0
    for index, path in enumerate(paths):
        run = read_run(path)
        for ax, x in ((by_frames, "env_steps"), (by_time, "wall_time")):
            xs, ys = run.series(RETURN, x)
            if x == "env_steps" and len(xs):
                most_frames = max(most_frames, float(xs[-1]))
            ax.plot(xs / (1e6 if x == "env_steps" else 60.0), ys, color=f"C{index}",
                    label=f"sampleforge, {path.name}")
    for frames, score, seconds in SAMPLE_FACTORY_HERE.get(env, []):
        by_frames.plot(frames / 1e6, score, "k^")
        by_time.plot(seconds / 60.0, score, "k^")
    if env in SAMPLE_FACTORY_HERE:
        for ax in (by_frames, by_time):
            ax.plot([], [], "k^", label="Sample Factory 2.1.1, same machine")
    if env in CLEANRL_PUBLISHED and CLEANRL_PUBLISHED[env][0] <= 1.2 * most_frames:
        frames, score = CLEANRL_PUBLISHED[env]  # only on runs that long: it sets the scale
        by_frames.plot(frames / 1e6, score, "rs", label="CleanRL ppo_atari.py, published")
    by_frames.set_xlabel("frames (millions)")
    by_time.set_xlabel("wall time (minutes)")
    for ax in (by_frames, by_time):
        ax.set_ylabel("mean return, last 100 games")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    figure.suptitle(f"{env}: atari family defaults")
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=100)
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="atari_breakout")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--frames", type=int, default=10_000_000)
    parser.add_argument("--minutes", type=float, default=None, help="cap on each run")
    parser.add_argument("--targets", type=float, nargs="+", default=[10.0, 20.0, 25.0])
    parser.add_argument("--train_dir", type=Path, default=Path("train_dir/atari_curves"))
    parser.add_argument("--out", type=Path, default=Path("docs"))
    parser.add_argument("--plot_only", action="store_true",
                        help="redraw from the runs already in --train_dir")
    args = parser.parse_args()
    paths = [args.train_dir / f"{args.env}_seed{seed}" for seed in args.seeds]
    if not args.plot_only:
        paths = [train_seed(args.env, seed, args.frames, args.minutes, args.train_dir)
                 for seed in args.seeds]
    for path in paths:
        cells = []
        for target in args.targets:
            reached = first_reach(path, target)
            cells.append(f"{target:g}: " + ("not reached" if reached is None else
                                            f"{reached[0] / 1e6:.2f}M frames, "
                                            f"{reached[1] / 60:.1f} min"))
        print(f"{path.name}: " + "; ".join(cells))
    print(f"wrote {plot(args.env, paths, args.out / f'{args.env}_curves.png')}")


if __name__ == "__main__":
    main()
