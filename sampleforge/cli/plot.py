"""`sampleforge plot`: learning curves of one or more experiments into a PNG."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = (
    "Draw learning curves (return vs env steps and wall time, FPS, policy lag) of "
    "experiments into a PNG; runs of the same config with different seeds show a mean and "
    "a band of one standard deviation."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "experiments",
        nargs="+",
        metavar="EXPERIMENT",
        help="Experiment names under --train_dir, or experiment folders.",
    )
    parser.add_argument(
        "--train_dir",
        default="train_dir",
        help="Root folder of the experiments. (default: train_dir)",
    )
    parser.add_argument(
        "--output",
        default="learning_curves.png",
        help="PNG file to write. (default: learning_curves.png)",
    )
    parser.add_argument("--title", default=None, help="Figure title. (default: the runs)")


def run(args: argparse.Namespace) -> int:
    from sampleforge.telemetry.learning_curves import plot_learning_curves

    folders = []
    for name in args.experiments:
        folder = Path(name) if Path(name, "progress.csv").is_file() else Path(args.train_dir, name)
        if not (folder / "progress.csv").is_file():
            print(
                f"sampleforge: experiment {name!r}: no progress.csv in {folder} (nor in {name})",
                file=sys.stderr,
            )
            return 2
        folders.append(folder)
    output = plot_learning_curves(folders, args.output, title=args.title)
    print(f"wrote {output}")
    return 0
