"""`sampleforge export`: write a trained policy of any algorithm as an ONNX model (its
deterministic acting step, no sampling or exploration; `export/onnx_export.py` has the I/O)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sampleforge.cli.policy_source import add_policy_arguments, input_errors, local_policy_from_args

HELP = (
    "Export a trained policy's acting step as an ONNX model: observations -> deterministic "
    "action, action logits or mean, value (recurrent state in and out) for an actor-critic; "
    "observations -> greedy action, Q-values for a value-based algorithm."
)
FORMATS = ("onnx",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("export")
    group.add_argument(
        "--format", choices=FORMATS, default="onnx", help="Model format. (default: onnx)"
    )
    group.add_argument(
        "--output",
        default=None,
        help="Output file. (default: policy.onnx in the experiment folder)",
    )
    group.add_argument("--opset", type=int, default=None, help="ONNX opset version. (default: 17)")
    add_policy_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from sampleforge.export.onnx_export import DEFAULT_OPSET, export_onnx

    try:
        source, policy, _ = local_policy_from_args(args)
    except input_errors() as e:
        print(f"sampleforge: {e}", file=sys.stderr)
        return 2
    output = Path(args.output) if args.output else source.experiment_dir / "policy.onnx"
    try:
        info = export_onnx(policy.model, output, opset_version=args.opset or DEFAULT_OPSET)
    except ValueError as e:  # an opset the exporter does not write, a folder as --output
        print(f"sampleforge: {e}", file=sys.stderr)
        return 2
    print(f"policy: {source.checkpoint}")
    print(
        f"wrote {info.path}: inputs {', '.join(info.input_names)}; outputs "
        f"{', '.join(info.output_names)}"
    )
    return 0
