"""`sampleforge train`: train a policy, resuming the experiment if it exists."""

from __future__ import annotations

import argparse
import sys

from sampleforge.cli.signals import early_exit_code, exit_code_of
from sampleforge.config import ConfigError
from sampleforge.config.cli_args import add_config_arguments, add_switch, config_from_args
from sampleforge.config.sources import describe_config

HELP = "Train a policy (resumes an existing experiment)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_switch(
        parser,
        "--print_config",
        help="Print every resolved setting with where it came from (default, "
        "family, preset or flag) and exit without training.",
    )
    add_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from sampleforge.components.runner import Runner, TrainingError
    from sampleforge.envs.registry import EnvStartError, UnknownEnvError
    from sampleforge.spaces import UnsupportedSpaceError

    try:
        cfg = config_from_args(args)
        if args.print_config:
            print("\n".join(describe_config(cfg)))
            return 0
        runner = Runner(cfg)
    except (ConfigError, UnknownEnvError, EnvStartError, UnsupportedSpaceError) as e:
        print(f"sampleforge: {e}", file=sys.stderr)
        return 2
    code = early_exit_code()
    if code:
        return code
    try:
        with runner:
            summary = runner.train()
    except TrainingError as e:
        print(
            f"sampleforge: training failed: {e.message if e.self_explained else e}", file=sys.stderr
        )
        return 1
    if runner.rank is not None and not runner.rank.is_main:
        return exit_code_of(runner.stop_signal)  # rank 0 reports for every rank
    print(
        f"stopped because: {summary.stopped_because}; env steps {summary.env_steps:,} in "
        f"{summary.wall_seconds:.1f} s ({summary.mean_fps:,.0f} FPS); mean return (last 100) "
        f"{summary.mean_return_last_100}"
    )
    print(f"experiment folder: {runner.exp.path}  (summary.json, progress.csv, tb/, checkpoints/)")
    return exit_code_of(runner.stop_signal)
