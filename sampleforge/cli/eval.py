"""`sampleforge eval`: many episodes of a trained policy across processes; mean, std, min, max."""

from __future__ import annotations

import argparse
import json
import sys

from sampleforge.cli.policy_source import (
    add_policy_arguments,
    input_errors,
    local_policy_from_args,
)
from sampleforge.cli.signals import stop_on_signals
from sampleforge.config.cli_args import add_switch

HELP = (
    "Evaluate a trained policy over many episodes in parallel processes (policy on CPU) and "
    "report mean, std, min and max return. Episodes: --eval_episodes; greedy actions: "
    "--eval_deterministic."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("eval")
    group.add_argument(
        "--num_processes",
        type=int,
        default=None,
        help="Evaluation processes. (default: one per core)",
    )
    add_switch(
        group,
        "--json",
        help="Print the result as one JSON object (with every episode's return and length).",
    )
    add_policy_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from sampleforge.evaluation import evaluate_in_processes

    if args.num_processes is not None and args.num_processes < 1:
        print(f"sampleforge: --num_processes {args.num_processes} must be >= 1", file=sys.stderr)
        return 2
    try:
        source, _, _ = local_policy_from_args(args)  # weights that do not fit: one line here
    except input_errors() as e:
        print(f"sampleforge: {e}", file=sys.stderr)
        return 2
    cfg = source.cfg
    stop_on_signals()  # the imports are done: Ctrl-C or SIGTERM ends the pool now
    result = evaluate_in_processes(
        cfg,
        source.env_spec,
        source.state_dict,
        num_episodes=cfg.eval_episodes,
        num_processes=args.num_processes,
        seed=cfg.seed,
        deterministic=cfg.eval_deterministic,
    )
    if args.json:
        print(
            json.dumps(
                {
                    **result.summary(),
                    "checkpoint": str(source.checkpoint),
                    "returns": list(result.returns),
                    "lengths": list(result.lengths),
                }
            )
        )
        return 0
    print(f"policy: {source.checkpoint}")
    print(
        f"episodes {result.num_episodes}: mean return {result.mean_return:.2f}, std "
        f"{result.std_return:.2f}, min {result.min_return:.2f}, max {result.max_return:.2f} "
        f"(mean length {result.mean_length:.1f})"
    )
    return 0
