"""Grid, random and PBT searches over sampleforge settings, run as Ray Tune trials.

    spec = SearchSpec(search="grid", base={"algorithm": "appo", "env": "CartPole-v1"},
                      params={"learning_rate": [1e-4, 3e-4]}, trial_env_steps=50_000,
                      output_dir=Path("train_dir/lr_sweep"))
    rows = run_search(spec)       # one row per trial; also written to results.csv

- grid: every combination of the `params` lists (`num_samples` times each);
- random: `num_samples` trials, each setting drawn from its list or range;
- pbt: a population of `num_samples` members started from `params` (the lists' points shared
  out evenly, the ranges drawn) that,
  every `perturbation_interval` env steps, copies the state of a better member into a worse
  one (bottom `quantile_fraction`) and mutates the `mutations` settings: a range's value is
  multiplied by one of `perturbation_factors` and clamped to the range (or, with
  `resample_probability`, drawn from it afresh); a list's value moves to a neighbour.

A range (`Range(low, high)`) is drawn log-uniformly when both ends are positive, else
uniformly; an integer setting's draws are integers. The metric is `mean_return` (the last 100
episodes), maximised. Trials train `env_steps_per_iteration` env steps per Tune iteration and
stop at `trial_env_steps` (or at the config's `stop_at_mean_return`).

The output folder holds `results.csv` (the table `run_search` returns), `trials/` (each
trial's sampleforge experiment folders) and, unless `storage_path` names shared storage for a
cluster, `ray/` (Ray Tune's experiment: results, checkpoints, PBT's `pbt_global.txt`).

Must not: decide anything about a single run (the trainable and the Python API do), or
schedule trials itself: Ray Tune does.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import random
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Union

from sampleforge.config import Config, ConfigError
from sampleforge.config.schema import config_fields
from sampleforge.tune import RAY_MISSING, RayMissingError
from sampleforge.tune.trainable import (
    METRIC,
    TIME_ATTR,
    TRIAL_KEY,
    SampleforgeTrainable,
    trial_config,
)

try:
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining
    from ray.tune.search.basic_variant import BasicVariantGenerator
except ImportError:
    raise RayMissingError(RAY_MISSING) from None


SearchKind = Literal["grid", "random", "pbt"]
SEARCHES: tuple[str, ...] = typing.get_args(SearchKind)


@dataclasses.dataclass(frozen=True)
class Range:
    """A closed interval of a numeric setting: what random search draws from and PBT keeps a
    mutated value inside."""

    low: float
    high: float

    @property
    def log(self) -> bool:
        return self.low > 0


Space = Union[Sequence[Any], Range]


@dataclasses.dataclass(frozen=True)
class SearchSpec:
    """One search; see the module docstring. `base` holds the `Config` settings of every trial
    (`algorithm` and `env` included), `params` the searched ones, `mutations` what PBT
    mutates."""

    search: SearchKind
    base: Mapping[str, Any]
    output_dir: Path
    trial_env_steps: int
    params: Mapping[str, Space] = dataclasses.field(default_factory=dict)
    mutations: Mapping[str, Space] = dataclasses.field(default_factory=dict)
    num_samples: int = 1
    env_steps_per_iteration: int | None = None
    """Default: the perturbation interval (pbt), else a tenth of trial_env_steps."""
    perturbation_interval: int | None = None
    """Env steps between PBT rounds of a member; default: a quarter of trial_env_steps."""
    perturbation_factors: tuple[float, float] = (1.2, 0.8)
    resample_probability: float = 0.25
    quantile_fraction: float = 0.25
    max_failures: int = 2
    """Times Ray restarts a failed trial from its last checkpoint before giving up on it."""
    keep_checkpoints: int = 4
    max_concurrent_trials: int | None = None
    cpus_per_trial: float | None = None
    gpus_per_trial: float | None = None
    storage_path: str | None = None
    seed: int | None = None
    """Seeds the search's own draws (random search, PBT's choices), not the trials' runs."""
    verbose: int = 1
    callbacks: Sequence[Any] = ()
    """More Ray Tune callbacks (`ray.tune.Callback`): progress hooks, fault drills."""


# --- the table ------------------------------------------------------------------------------
TABLE_COLUMNS = ("trial", "status", "env_steps", METRIC, "best_mean_return", "iterations")


def run_search(spec: SearchSpec) -> list[dict[str, Any]]:
    """Run the search on the Ray cluster this process is connected to (or a local one that
    `ray.init` starts); returns one row per trial, best first, and writes them to
    `<output_dir>/results.csv`. ConfigError before any trial starts for a bad setting."""
    param_space = build_param_space(spec)
    output = Path(spec.output_dir).absolute()
    tuner = tune.Tuner(
        SampleforgeTrainable,
        param_space=param_space,
        tune_config=_tune_config(spec),
        run_config=tune.RunConfig(
            # Named after the search: searches sharing --storage_path keep apart there.
            name=output.name,
            storage_path=_storage(spec.storage_path, output),
            stop={TIME_ATTR: spec.trial_env_steps},
            failure_config=tune.FailureConfig(max_failures=spec.max_failures),
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=spec.keep_checkpoints,
                checkpoint_frequency=1,
                checkpoint_at_end=True,
            ),
            verbose=spec.verbose,
            callbacks=list(spec.callbacks),
            log_to_file=True,  # each trial's output (status lines, errors) in its folder
        ),
    )
    results = tuner.fit()
    names = sorted(set(spec.params) | set(spec.mutations))
    rows = [_row(results[i], names, spec.trial_env_steps) for i in range(len(results))]
    rows.sort(key=lambda row: -_sortable(row[METRIC]))
    write_table(output / "results.csv", rows)
    return rows


def _storage(path: str | None, output: Path) -> str:
    """Where Ray keeps results and checkpoints: `path` (a URI such as s3://..., or a folder
    every node sees) or, by default, the output folder (one machine)."""
    if path is None:
        return str(output)
    return path if "://" in path else str(Path(path).absolute())


def build_param_space(spec: SearchSpec) -> dict[str, Any]:
    """Ray Tune's param_space for `spec`, after checking every setting (ConfigError)."""
    check_spec(spec)
    settings = {
        "env_steps_per_iteration": iteration_env_steps(spec),
        "trials_dir": str((Path(spec.output_dir) / "trials").absolute()),
        "cpus": spec.cpus_per_trial,
        "gpus": spec.gpus_per_trial,
    }
    space: dict[str, Any] = {**spec.base, TRIAL_KEY: settings}
    for name, values in spec.params.items():
        if isinstance(values, Range) or spec.search == "random":
            space[name] = _domain(name, values)
        else:  # grid, and a PBT population's starting points
            space[name] = tune.grid_search(list(values))
    return space


def grid_points(spec: SearchSpec) -> int:
    """How many points the lists make (grid search; a PBT population's starting points)."""
    if spec.search == "random":
        return 1
    return math.prod(len(v) for v in spec.params.values() if not isinstance(v, Range))


def samples_per_point(spec: SearchSpec) -> int:
    """Ray's num_samples: a PBT population is shared out over its starting points."""
    return spec.num_samples // grid_points(spec) if spec.search == "pbt" else spec.num_samples


def iteration_env_steps(spec: SearchSpec) -> int:
    if spec.env_steps_per_iteration is not None:
        return spec.env_steps_per_iteration
    if spec.search == "pbt":
        return perturbation_interval(spec)
    return max(1, spec.trial_env_steps // 10)


def perturbation_interval(spec: SearchSpec) -> int:
    return spec.perturbation_interval or max(1, spec.trial_env_steps // 4)


def _tune_config(spec: SearchSpec) -> tune.TuneConfig:
    scheduler = None
    search_alg = None
    if spec.search == "pbt":
        random.seed(spec.seed)  # Ray's PBT draws from the random module
        scheduler = PopulationBasedTraining(
            time_attr=TIME_ATTR,
            perturbation_interval=perturbation_interval(spec),
            hyperparam_mutations={k: _mutation(k, v) for k, v in spec.mutations.items()},
            quantile_fraction=spec.quantile_fraction,
            resample_probability=spec.resample_probability,
            perturbation_factors=spec.perturbation_factors,
            custom_explore_fn=_Clamp(
                {k: v for k, v in spec.mutations.items() if isinstance(v, Range)}
            ),
            log_config=True,
            # Asynchronous rounds: each member acts on the others' latest results as it
            # reaches the interval. (Ray 2.60's synch mode never resumes its paused trials
            # when actors are reused.)
        )
    if spec.search != "grid":
        search_alg = BasicVariantGenerator(random_state=spec.seed)
    return tune.TuneConfig(
        metric=METRIC,
        mode="max",
        scheduler=scheduler,
        search_alg=search_alg,
        num_samples=samples_per_point(spec),
        max_concurrent_trials=spec.max_concurrent_trials,
        # An actor takes the next trial (or PBT's new config) without a new process; its run
        # is restarted anyway (reset_config), but the imports are not paid again.
        reuse_actors=True,
    )


class _Clamp:
    """PBT's explore step, after Ray's: keep each mutated value inside its range (Ray's
    multiplication by a perturbation factor knows no bounds)."""

    def __init__(self, ranges: Mapping[str, Range]):
        self.ranges = dict(ranges)

    def __call__(self, config: dict[str, Any]) -> dict[str, Any]:
        for name, bounds in self.ranges.items():
            value = config[name]
            clamped = min(max(value, bounds.low), bounds.high)
            config[name] = type(value)(clamped)
        return config


def _mutation(name: str, space: Space) -> Any:
    return _domain(name, space) if isinstance(space, Range) else list(space)


def _domain(name: str, space: Space) -> Any:
    """A Ray search space: a choice among a list, or a draw from a range."""
    if not isinstance(space, Range):
        return tune.choice(list(space))
    if _is_int(name):
        low, high = int(space.low), int(space.high)
        return tune.lograndint(low, high + 1) if space.log else tune.randint(low, high + 1)
    return (
        tune.loguniform(space.low, space.high) if space.log else tune.uniform(space.low, space.high)
    )


# --- checks ---------------------------------------------------------------------------------
def check_spec(spec: SearchSpec) -> None:
    """ConfigError naming every problem of `spec`, before anything starts."""
    problems = _spec_problems(spec)
    if problems:
        raise ConfigError(problems)
    for config in corner_configs(spec):
        trial_config(config)  # each setting's own check (ConfigError)


def _spec_problems(spec: SearchSpec) -> list[str]:
    problems = []
    fields = {f.name for f in config_fields()}
    if spec.search not in SEARCHES:
        problems.append(f"search: {spec.search!r} is not one of {', '.join(SEARCHES)}")
    for name, space in {**spec.params, **spec.mutations}.items():
        if name not in fields:
            problems.append(f"{name}: not a setting (see sampleforge train --help)")
        elif isinstance(space, Range):
            if not (math.isfinite(space.low) and math.isfinite(space.high)) or (
                space.low >= space.high
            ):
                problems.append(f"{name}: range {space.low}:{space.high} needs low < high")
            elif spec.search == "grid" and name in spec.params:
                problems.append(f"{name}: a grid search needs values (a,b,c), not a range")
            elif not _is_number(name):
                problems.append(f"{name}: a range needs a numeric setting")
        elif len(space) == 0:
            problems.append(f"{name}: no values")
    if spec.mutations and spec.search != "pbt":
        problems.append("mutate: only a pbt search mutates settings")
    if spec.search == "pbt" and not spec.mutations:
        problems.append("search pbt: give the settings to mutate (--mutate name=low:high)")
    points = grid_points(spec)
    if spec.search == "pbt" and points and spec.num_samples % points:
        problems.append(
            f"population {spec.num_samples}: must be a multiple of the {points} starting "
            "points the --param lists make (each point starts the same number of members)"
        )
    problems.extend(_frozen_mutations(spec))
    for name, value in (
        ("trial_env_steps", spec.trial_env_steps),
        ("num_samples", spec.num_samples),
        ("env_steps_per_iteration", spec.env_steps_per_iteration),
        ("perturbation_interval", spec.perturbation_interval),
    ):
        if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
            problems.append(f"{name}: {value!r} must be an integer >= 1")
    if not 0 < spec.quantile_fraction <= 0.5:
        problems.append(f"quantile_fraction: {spec.quantile_fraction} must be in (0, 0.5]")
    if not 0 <= spec.resample_probability <= 1:
        problems.append(f"resample_probability: {spec.resample_probability} must be in [0, 1]")
    if any(not (math.isfinite(f) and f > 0) for f in spec.perturbation_factors):
        problems.append(f"perturbation_factors: {spec.perturbation_factors} must be > 0")
    for name in ("experiment", "train_dir", "restart_behavior", "with_pbt", "distributed"):
        if name in spec.params or name in spec.mutations:
            problems.append(f"{name}: not searchable (each trial sets its own)")
    if spec.base.get("with_pbt") or spec.base.get("distributed"):
        problems.append(
            "with_pbt and distributed cannot be used with tune: each trial is one run on "
            "one machine, and --search pbt is the population"
        )
    devices = [spec.base.get("device", "")]
    for spaces in (spec.params, spec.mutations):
        searched = spaces.get("device")
        devices += list(searched) if isinstance(searched, (list, tuple)) else []
    for device in dict.fromkeys(str(d) for d in devices if str(d).startswith("cuda:")):
        problems.append(
            f"device: {device!r} picks a GPU; under Ray Tune use --device cuda (Ray gives "
            "each trial its GPU)"
        )
    return problems


def _frozen_mutations(spec: SearchSpec) -> list[str]:
    """PBT restores a member from another's checkpoint under mutated settings: the settings a
    checkpoint depends on cannot be mutated."""
    from sampleforge.checkpoint.experiment_dir import FROZEN_ON_RESUME

    return [
        f"{name}: PBT cannot mutate it (a checkpoint depends on it; allowed: any other "
        "numeric setting, e.g. learning_rate, entropy_coeff, gamma)"
        for name in spec.mutations
        if name in FROZEN_ON_RESUME
    ]


def corner_configs(spec: SearchSpec) -> list[dict[str, Any]]:
    """Trial configs that together use every listed value and both ends of every range."""
    spaces = {**spec.mutations, **spec.params}
    corners: list[dict[str, Any]] = []
    for name, space in spaces.items():
        values = [space.low, space.high] if isinstance(space, Range) else list(space)
        if isinstance(space, Range) and _is_int(name):
            values = [int(v) for v in values]
        corners.extend({**spec.base, name: value} for value in values)
    return [{**c, TRIAL_KEY: {}} for c in corners or [dict(spec.base)]]


def _is_int(name: str) -> bool:
    return _numeric_type(name) is int


def _is_number(name: str) -> bool:
    return _numeric_type(name) in (int, float)


def _numeric_type(name: str) -> type | None:
    annotation = typing.get_type_hints(Config).get(name)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    inner = args[0] if len(args) == 1 else annotation
    return inner if inner in (int, float) else None


# --- results --------------------------------------------------------------------------------
def _row(result: Any, names: Sequence[str], trial_env_steps: int) -> dict[str, Any]:
    metrics = result.metrics or {}
    config = result.config or {}
    row = {
        "trial": metrics.get("trial_id", ""),
        "status": _status(result, metrics, trial_env_steps),
        "env_steps": metrics.get(TIME_ATTR, 0),
        METRIC: metrics.get(METRIC, -math.inf),
        "best_mean_return": metrics.get("best_mean_return", -math.inf),
        "iterations": metrics.get("training_iteration", 0),
    }
    row.update({name: config.get(name) for name in names})
    row["experiment_dir"] = metrics.get("experiment_dir", "")
    return row


def _status(result: Any, metrics: dict[str, Any], trial_env_steps: int) -> str:
    """'error' (failed past max_failures), 'done' (its env steps trained, or its run said it
    is done: stop_at_mean_return), else 'unfinished' (the search was interrupted first)."""
    if result.error:
        return "error"
    if metrics.get("done") or metrics.get(TIME_ATTR, 0) >= trial_env_steps:
        return "done"
    return "unfinished"


def _sortable(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return -math.inf
    return number if math.isfinite(number) else -math.inf


def write_table(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """The rows as CSV (columns: the first row's keys)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else list(TABLE_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as an aligned text table (experiment folders left out: they are long)."""
    if not rows:
        return "no trials"
    columns = [c for c in rows[0] if c != "experiment_dir"]
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)
