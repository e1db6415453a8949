"""`sampleforge` command line: one module per subcommand, flags derived from the config schema.

    sampleforge train --env CartPole-v1
    sampleforge train --env atari_breakout --num_workers 2 --num_envs_per_worker 16
    sampleforge enjoy --experiment CartPole-v1 --save_video
    sampleforge eval --experiment CartPole-v1 --eval_episodes 100
    sampleforge plot CartPole-v1 --output curves.png
    sampleforge export --experiment CartPole-v1 --format onnx
    sampleforge tune --env CartPole-v1 --search pbt --mutate learning_rate=1e-5:1e-2

Each subcommand module has `HELP`, `add_arguments(parser)` and `run(args) -> exit code`.
Exit codes: 0 done, 1 a component failed, 2 bad input, 130 Ctrl-C, 143 SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

# Only this light module before `main` records signals: a Ctrl-C in the middle of any other
# import would otherwise end the command with a raw traceback or a half-imported module.
from sampleforge.cli.signals import early_exit_code, record_early_signals

SUBCOMMANDS = ("train", "enjoy", "eval", "plot", "export", "bench", "tune")


def build_parser() -> argparse.ArgumentParser:
    from sampleforge.config.cli_args import ConfigArgumentParser

    parser = ConfigArgumentParser(prog="sampleforge", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(
        dest="command", required=True, parser_class=ConfigArgumentParser
    )
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"sampleforge.cli.{name}")
        sub = commands.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    record_early_signals()
    import logging

    from sampleforge.comms.heap import reuse_freed_tensor_memory
    from sampleforge.config import ConfigError

    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%H:%M:%S")
    reuse_freed_tensor_memory()  # serial mode trains in this process (see comms/heap.py)
    try:
        args = build_parser().parse_args(argv)
        return early_exit_code() or args.run(args)
    except ConfigError as e:
        print(f"sampleforge: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM raised as `signals.Interrupted`
        print("sampleforge: interrupted", file=sys.stderr)
        return getattr(e, "exit_code", 130)


if __name__ == "__main__":
    sys.exit(main())
