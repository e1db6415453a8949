"""`sampleforge` command line: one subcommand per task, flags derived from the config schema.

    sampleforge train --env CartPole-v1
    sampleforge train --env atari_breakout --num_workers 2 --num_envs_per_worker 16

Exit codes: 0 done, 1 a component failed, 2 bad input, 130 Ctrl-C, 143 SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import Sequence

from sampleforge.config import ConfigError
from sampleforge.config.cli_args import ConfigArgumentParser, add_config_arguments, config_from_args


def build_parser() -> argparse.ArgumentParser:
    parser = ConfigArgumentParser(prog="sampleforge", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=ConfigArgumentParser)
    train = commands.add_parser("train", help="Train a policy (resumes an existing experiment).",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_config_arguments(train)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%H:%M:%S")
    args = build_parser().parse_args(argv)
    try:
        if args.command == "train":
            return _train(args)
    except ConfigError as e:
        print(f"sampleforge: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the runner took over signal handling
        print("sampleforge: interrupted", file=sys.stderr)
        return 130
    return 2


def _train(args: argparse.Namespace) -> int:
    from sampleforge.components.runner import Runner, TrainingError
    from sampleforge.envs.registry import UnknownEnvError
    from sampleforge.spaces import UnsupportedSpaceError

    try:
        cfg = config_from_args(args)
        runner = Runner(cfg)
    except (ConfigError, UnknownEnvError, UnsupportedSpaceError) as e:
        print(f"sampleforge: {e}", file=sys.stderr)
        return 2
    try:
        with runner:
            summary = runner.train()
    except TrainingError as e:
        print(f"sampleforge: training failed: {e}", file=sys.stderr)
        return 1
    print(f"stopped because: {summary.stopped_because}; env steps {summary.env_steps:,} in "
          f"{summary.wall_seconds:.1f} s ({summary.mean_fps:,.0f} FPS); mean return (last 100) "
          f"{summary.mean_return_last_100}")
    print(f"experiment folder: {runner.exp.path}  (summary.json, progress.csv, tb/, "
          f"checkpoints/)")
    if runner.stop_signal == signal.SIGINT:
        return 130
    if runner.stop_signal == signal.SIGTERM:
        return 143
    return 0


if __name__ == "__main__":
    sys.exit(main())
