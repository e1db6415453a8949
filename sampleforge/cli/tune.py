"""`sampleforge tune`: grid, random and PBT searches over settings, each trial a run on Ray Tune.

    sampleforge tune --algorithm appo --env CartPole-v1 --search grid \
        --param learning_rate=1e-4,3e-4 --param entropy_coeff=0,0.01 --trial_env_steps 50000
    sampleforge tune --env CartPole-v1 --search pbt --population 4 \
        --perturbation_interval 20000 --mutate learning_rate=1e-5:1e-2 --trial_env_steps 200000

Every `sampleforge train` flag sets that setting for every trial; `--param` and `--mutate` name
the searched ones. `--experiment` names the search's folder under `--train_dir`. Ray is an
optional extra (`pip install -e '.[ray]'`); docs/distributed.md shows a local and a cluster run.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import typing
from pathlib import Path
from typing import Any, Callable

from sampleforge.config import ConfigError
from sampleforge.config.cli_args import (
    add_config_arguments,
    config_from_args,
    nonnegative_number,
    positive_number,
)

HELP = "Search settings (grid, random, PBT) with Ray Tune: one run per trial."

# The search's own settings from the Config flags: they name its folder, not the trials'.
_NOT_FOR_TRIALS = ("experiment", "train_dir", "restart_behavior")


def _integer_at_least(low: int) -> Callable[[str], int]:
    """argparse type of a flag that takes an integer >= `low`."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
        if number < low:
            raise argparse.ArgumentTypeError(
                f"{value} is not allowed (allowed: an integer >= {low})"
            )
        return number

    return parse


_count = _integer_at_least(1)
_natural = _integer_at_least(0)


def _fraction(value: str) -> float:
    """argparse type of a probability in [0, 1]."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0 <= number <= 1:
        raise argparse.ArgumentTypeError(f"{value} is not allowed (allowed: 0 to 1)")
    return number


def _factors(value: str) -> tuple[float, float]:
    """argparse type of two positive numbers, `a,b`."""
    parts = value.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"{value!r} is not two numbers a,b (e.g. 1.2,0.8)")
    a, b = (positive_number(p) for p in parts)
    return a, b


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("search (Ray Tune)")
    add = group.add_argument
    add("--search", choices=("grid", "random", "pbt"), default="grid",
        help="grid: every combination of the --param lists; random: --num_samples trials, "
        "each setting drawn from its list or range; pbt: population-based training "
        "(default: grid)")  # fmt: skip
    add("--param", action="append", default=[], metavar="NAME=A,B,C|NAME=LOW:HIGH",
        help="A searched setting: a list of values, or (random, pbt) a range, drawn "
        "log-uniformly when both ends are > 0. Repeat for more settings.")  # fmt: skip
    add("--mutate", action="append", default=[], metavar="NAME=LOW:HIGH|NAME=A,B,C",
        help="pbt: a setting PBT mutates, kept inside its range (or moved to a neighbouring "
        "value of its list); the first values are drawn from it unless --param gives them. "
        "Repeat for more.")  # fmt: skip
    add("--trial_env_steps", type=_count, default=None,
        help="Env steps each trial trains (default: --train_for_env_steps)")  # fmt: skip
    add("--num_samples", type=_count, default=1,
        help="random: number of trials; grid: times each point runs (default: 1)")  # fmt: skip
    add("--population", type=_count, default=4,
        help="pbt: number of members (default: 4)")  # fmt: skip
    add("--perturbation_interval", type=_count, default=None,
        help="pbt: env steps of a member between two exploit/explore rounds "
        "(default: a quarter of --trial_env_steps)")  # fmt: skip
    add("--perturbation_factors", type=_factors, default=(1.2, 0.8), metavar="A,B",
        help="pbt: a mutated range setting is multiplied by A or B (default: 1.2,0.8)")  # fmt: skip
    add("--resample_probability", type=_fraction, default=0.25,
        help="pbt: chance that a mutated setting is drawn afresh instead (default: 0.25)")  # fmt: skip
    add("--quantile_fraction", type=_fraction, default=0.25,
        help="pbt: the bottom fraction copies the top fraction (default: 0.25)")  # fmt: skip
    add("--env_steps_per_iteration", type=_count, default=None,
        help="Env steps per Tune iteration: results and checkpoints come this often "
        "(default: --perturbation_interval for pbt, else a tenth of a trial)")  # fmt: skip
    add("--max_failures", type=_natural, default=2,
        help="Times a failed trial restarts from its last checkpoint (default: 2)")  # fmt: skip
    add("--max_concurrent_trials", type=_count, default=None,
        help="At most this many trials at once (default: as many as the resources allow)")  # fmt: skip
    add("--cpus_per_trial", type=positive_number, default=None,
        help="CPUs a trial asks Ray for (default: one per process of its run)")  # fmt: skip
    add("--gpus_per_trial", type=nonnegative_number, default=None,
        help="GPUs a trial asks Ray for, a fraction to share one (default: 1 with --device "
        "cuda, else 0)")  # fmt: skip
    add("--ray_address", default=None,
        help="Ray cluster to run on: 'auto' for one started with `ray start` on this machine, "
        "or host:port (default: a local Ray for this command)")  # fmt: skip
    add("--storage_path", default=None,
        help="Where Ray keeps results and checkpoints; on a cluster a folder every node "
        "sees or a URI such as s3://bucket/path (default: the search's folder)")  # fmt: skip
    add("--search_seed", type=int, default=None,
        help="Seed of the search's own draws (random values, PBT choices)")  # fmt: skip
    add_config_arguments(parser, heading="every trial", note="Each trial's run settings.")


def run(args: argparse.Namespace) -> int:
    from sampleforge.tune import RayMissingError, require_ray

    try:
        require_ray()
    except RayMissingError as e:
        print(f"sampleforge: {e}", file=sys.stderr)
        return 2
    from sampleforge.tune.search import check_spec, format_table, run_search

    spec = _spec(args)
    check_spec(spec)  # every bad setting before Ray starts
    _check_output(spec.output_dir)
    import ray

    if args.ray_address is None:
        ray.init(include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=args.ray_address, log_to_driver=False)
    try:
        _check_fits(spec, ray.cluster_resources(), local=args.ray_address is None)
        rows = run_search(spec)
    finally:
        ray.shutdown()
    print(format_table(rows))
    print(f"results: {Path(spec.output_dir).absolute() / 'results.csv'}")
    failed = [row["trial"] for row in rows if row["status"] == "error"]
    unfinished = [row["trial"] or "(not started)" for row in rows if row["status"] == "unfinished"]
    if failed:
        print(f"sampleforge: trials failed: {', '.join(failed)}", file=sys.stderr)
    if unfinished:
        print(
            f"sampleforge: trials did not finish (interrupted?): {', '.join(unfinished)}",
            file=sys.stderr,
        )
    return 1 if failed or unfinished else 0


def _spec(args: argparse.Namespace) -> Any:
    """The SearchSpec of the flags; ConfigError (one line each) for a bad one."""
    from sampleforge.config.schema import config_fields
    from sampleforge.tune.search import SearchSpec

    cfg = config_from_args(args)  # the trials' common settings, checked as `train` would
    given = {f.name for f in config_fields() if f.name in vars(args)}
    base = {"algorithm": cfg.algorithm, "env": cfg.env}
    base.update({name: getattr(cfg, name) for name in given if name not in _NOT_FOR_TRIALS})
    name = cfg.experiment or f"tune_{cfg.algorithm}_{cfg.env}_{time.strftime('%Y%m%d-%H%M%S')}"
    return SearchSpec(
        search=args.search,
        base=base,
        output_dir=Path(cfg.train_dir) / name.replace("/", "_"),
        trial_env_steps=args.trial_env_steps or cfg.train_for_env_steps,
        params=dict(_spaces(args.param, "param")),
        mutations=dict(_spaces(args.mutate, "mutate")),
        num_samples=args.population if args.search == "pbt" else args.num_samples,
        env_steps_per_iteration=args.env_steps_per_iteration,
        perturbation_interval=args.perturbation_interval,
        perturbation_factors=args.perturbation_factors,
        resample_probability=args.resample_probability,
        quantile_fraction=args.quantile_fraction,
        max_failures=args.max_failures,
        max_concurrent_trials=args.max_concurrent_trials,
        cpus_per_trial=args.cpus_per_trial,
        gpus_per_trial=args.gpus_per_trial,
        storage_path=args.storage_path,
        seed=args.search_seed,
    )


def _spaces(items: list[str], flag: str) -> list[tuple[str, Any]]:
    """`NAME=A,B,C` -> (NAME, [A, B, C]) with values of the setting's type; `NAME=LOW:HIGH` ->
    (NAME, Range(LOW, HIGH))."""
    from sampleforge.config.schema import Config
    from sampleforge.config.validation import coerce_value, unwrap_optional
    from sampleforge.tune.search import Range

    hints = typing.get_type_hints(Config)
    spaces = []
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not name or not values:
            raise ConfigError([f"--{flag} {item!r}: expected NAME=A,B,C or NAME=LOW:HIGH"])
        if name not in hints:
            raise ConfigError([f"--{flag} {name}: not a setting (see sampleforge train --help)"])
        if typing.get_origin(hints[name]) is tuple:
            raise ConfigError([f"--{flag} {name}: a list setting cannot be searched here"])
        numeric = unwrap_optional(hints[name])[0] in (int, float)
        if numeric and ":" in values and "," not in values:  # cuda:1 is a value, not a range
            spaces.append((name, _range(flag, name, values, Range)))
            continue
        try:
            spaces.append((name, [coerce_value(name, v, hints[name]) for v in values.split(",")]))
        except ValueError as e:
            raise ConfigError([f"--{flag} {e}"]) from None
    return spaces


def _range(flag: str, name: str, values: str, range_type: Any) -> Any:
    low, _, high = values.partition(":")
    try:
        bounds = float(low), float(high)
    except ValueError:
        raise ConfigError([f"--{flag} {name}={values}: LOW:HIGH must be two numbers"]) from None
    if not all(math.isfinite(b) for b in bounds) or bounds[0] >= bounds[1]:
        raise ConfigError([f"--{flag} {name}={values}: needs finite LOW < HIGH"])
    return range_type(*bounds)


def _check_fits(spec: Any, cluster: dict[str, float], local: bool) -> None:
    """On a local Ray, a trial that needs more CPUs or GPUs than the machine has would wait
    forever: refuse it (a cluster may still grow, so there Ray's own warning stands)."""
    from sampleforge.tune.resources import trial_resources
    from sampleforge.tune.search import build_param_space, corner_configs
    from sampleforge.tune.trainable import trial_config

    if not local:
        return
    build_param_space(spec)  # every setting checked first
    # The base settings and every searched value: any one of them may make a trial too big.
    for corner in corner_configs(spec):
        need = trial_resources(
            trial_config(corner), cpus=spec.cpus_per_trial, gpus=spec.gpus_per_trial
        )
        _check_need(need, cluster, searched=_searched_values(spec, corner))


def _searched_values(spec: Any, corner: dict[str, Any]) -> str:
    """' (with NAME=VALUE)' for the searched value in `corner`, if any."""
    for name in {**spec.mutations, **spec.params}:
        if name in corner and corner[name] != spec.base.get(name, object()):
            return f" (with {name}={corner[name]})"
    return ""


def _check_need(need: dict[str, float], cluster: dict[str, float], searched: str) -> None:
    for kind, amount in need.items():
        if amount > cluster.get(kind, 0.0):
            raise ConfigError(
                [
                    f"a trial{searched} needs {amount:g} {kind}s (one per process of its run) "
                    f"but this machine has {cluster.get(kind, 0.0):g}: lower --num_workers or "
                    "--num_inference_workers, use --serial_mode, or set --cpus_per_trial"
                    if kind == "CPU"
                    else f"a trial{searched} needs {amount:g} GPUs but this machine has "
                    f"{cluster.get(kind, 0.0):g}: use --device cpu or --gpus_per_trial"
                ]
            )


def _check_output(output: Path) -> None:
    if output.exists() and any(output.iterdir()):
        raise ConfigError(
            [f"{output} exists and is not empty: give another --experiment for this search"]
        )
