"""Building a `Config` from untrusted input, and checking it before any process starts.

Every problem is collected and reported at once in one `ConfigError`: unknown names (with a
"did you mean"), wrong types, out-of-range values and cross-field violations. Nothing here
touches environments or processes.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from typing import Any, Callable, Iterable, Mapping

from sampleforge.comms.cpu_affinity import affinity_supported
from sampleforge.config.algorithms import (
    ALGORITHM_FAMILIES,
    REPLAY_FAMILIES,
    FamilyName,
    family_algorithms,
)
from sampleforge.config.ranges import (
    FLOAT32_MAX,
    config_hints,
    float_problems,
    pbt_problems,
    seed_problems,
)
from sampleforge.config.schema import Config, config_fields
from sampleforge.config.sources import SOURCES_KEY, attach_sources, layered_settings


class ConfigError(ValueError):
    """One or more invalid settings; `problems` lists each one on its own line."""

    def __init__(self, problems: Iterable[str]):
        self.problems = list(problems)
        if len(self.problems) == 1:
            super().__init__(f"invalid config: {self.problems[0]}")
        else:
            lines = "\n".join(f"  - {p}" for p in self.problems)
            super().__init__(f"invalid config ({len(self.problems)} problems):\n{lines}")

    def __reduce__(self):
        # Rebuilt from its problems, not from the message (a Ray trial's error is pickled):
        # the message would be read as one problem per character.
        return (type(self), (self.problems,))


def _field_types() -> dict[str, Any]:
    return config_hints()


def suggest_name(name: str, known: Iterable[str]) -> str:
    """' (did you mean --x?)' for a close known name, else ''."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    """`X | None` -> (X, True); any other annotation -> (it, False)."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return annotation, False


# String settings with a form: name -> (pattern, what it allows, for the error).
STRING_FORMS: dict[str, tuple[re.Pattern[str], str]] = {
    "device": (re.compile(r"auto|cpu|cuda(:\d+)?"), "auto, cpu, cuda, cuda:K (K a GPU index)"),
}


def coerce_value(name: str, value: Any, annotation: Any) -> Any:
    """Convert `value` (possibly a CLI string) to the field's type, or raise ValueError."""
    inner, optional = unwrap_optional(annotation)
    if value is None or (optional and isinstance(value, str) and value.lower() == "none"):
        if optional:
            return None
        raise ValueError(f"{name}: None is not allowed (expected {_describe(inner)})")
    origin = typing.get_origin(inner)
    if origin is typing.Literal:
        allowed = typing.get_args(inner)
        if value not in allowed:
            raise ValueError(
                f"{name}: {value!r} is not one of {', '.join(map(str, allowed))}"
                f"{suggest_name(str(value), map(str, allowed))}"
            )
        return value
    if inner is bool:
        return _to_bool(name, value)
    if inner is int:
        return _to_int(name, value)
    if inner is float:
        return _to_float(name, value)
    if inner is str:
        if not isinstance(value, str):
            raise ValueError(f"{name}: expected a string, got {value!r}")
        form = STRING_FORMS.get(name)
        if form is not None and not form[0].fullmatch(value):
            raise ValueError(f"{name}: {value!r} is not one of {form[1]}")
        return value
    if origin is tuple:
        return _to_int_tuple(name, value)
    raise TypeError(f"no conversion for field {name} of type {inner}")  # a schema bug


def _describe(annotation: Any) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return "one of " + ", ".join(map(str, typing.get_args(annotation)))
    return getattr(annotation, "__name__", str(annotation))


def _to_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{name}: {value!r} is not a boolean (use true or false)")


def _to_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        try:
            return int(text)  # exact, however large
        except ValueError:
            pass
        try:
            as_float = float(text)
        except ValueError:
            as_float = math.nan
        if math.isfinite(as_float) and as_float.is_integer():
            return int(as_float)  # accepts 1e6 on the command line
    raise ValueError(f"{name}: expected an integer, got {value!r}")


def _to_float(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            raise ValueError(f"{name}: {value} is too large for a number") from None
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise ValueError(f"{name}: expected a number, got {value!r}")


def _to_int_tuple(name: str, value: Any) -> tuple[int, ...]:
    items = value.split(",") if isinstance(value, str) else value
    try:
        out = tuple(_to_int(name, v.strip() if isinstance(v, str) else v) for v in items)
    except (ValueError, TypeError):
        raise ValueError(f"{name}: expected comma-separated integers, got {value!r}") from None
    if not out:
        raise ValueError(f"{name}: expected at least one integer")
    return out


def make_config(base: Config | None = None, **overrides: Any) -> Config:
    """A validated `Config`: `base` (default: all defaults) with `overrides` applied, over the
    env family's settings and the preset's (`config/sources.py`); the result records where
    each setting came from (`config_sources`).

    Raises ConfigError listing every unknown name, bad type and violated rule at once.
    """
    overrides, sources = layered_settings(base, overrides)
    base = base or Config()
    types_by_name = _field_types()
    autos: dict[str, Callable[[], Any] | None] = {
        f.name: f.metadata.get("auto") for f in config_fields()
    }
    problems: list[str] = []
    values: dict[str, Any] = {}
    for name, value in overrides.items():
        if name not in types_by_name:
            problems.append(f"unknown setting '{name}'{suggest_name(name, types_by_name)}")
            continue
        auto = autos.get(name)
        if value == "auto" and auto is not None:
            values[name] = auto()
            continue
        try:
            values[name] = coerce_value(name, value, types_by_name[name])
        except ValueError as e:
            problems.append(str(e))
    if problems:
        raise ConfigError(problems)
    cfg = dataclasses.replace(base, **values)
    validate_config(cfg)
    return attach_sources(cfg, sources)


def config_from_dict(data: Mapping[str, Any]) -> Config:
    """Rebuild a config saved with `config_to_dict` (unknown keys are refused), with the
    sources saved next to it if there are any."""
    data = dict(data)
    saved_sources = data.pop(SOURCES_KEY, None)
    cfg = make_config(**data)
    if isinstance(saved_sources, dict):
        attach_sources(cfg, saved_sources)
    return cfg


_POSITIVE_INTS = (
    "num_workers",
    "num_envs_per_worker",
    "worker_num_splits",
    "num_inference_workers",
    "num_policies",
    "rollout",
    "batch_size",
    "num_batches_per_epoch",
    "num_epochs",
    "rnn_size",
    "keep_checkpoints",
    "train_for_env_steps",
    "max_policy_lag",
    "max_consecutive_skipped_updates",
    "max_consecutive_env_faults",
    "eval_episodes",
    "snapshot_every_env_steps",
    "pbt_period_env_steps",
    "learner_torch_threads",
    # the replay families (`algo/replay_settings.py`)
    "replay_size",
    "learning_starts",
    "target_update_period",
    # value-based (`algo/value_settings.py`)
    "exploration_env_steps",
    "num_quantiles",
    # continuous control (`algo/continuous_settings.py`)
    "num_critics",
    "policy_delay",
)
_NON_NEGATIVE_INTS = (
    "num_frozen_opponents",
    "random_action_steps",
    "batch_renorm_warmup",
    "lr_decay_env_steps",
)
# A categorical support needs two atoms to span [v_min, v_max]; FQF's proposal two fractions
# to place a quantile between 0 and 1.
_AT_LEAST_TWO_INTS = ("num_atoms", "num_fractions")
# The replay keeps each transition's steps to its bootstrap as uint8 (`buffers/replay.py`).
MAX_N_STEP = 255


def range_problems(cfg: Config) -> list[str]:
    """Out-of-range single values: the floats (finite, within float32 and their own range,
    see `config/ranges.py`), the seed, and every other setting."""
    return float_problems(cfg) + seed_problems(cfg) + _value_range_problems(cfg)


def _value_range_problems(cfg: Config) -> list[str]:
    problems = []
    for name in _POSITIVE_INTS:
        if getattr(cfg, name) < 1:
            problems.append(f"{name}: {getattr(cfg, name)} must be >= 1")
    if not 0 <= cfg.max_component_restarts <= 100:
        problems.append(
            f"max_component_restarts: {cfg.max_component_restarts} must be in "
            "[0, 100] (each allowed restart reserves a fresh inbox per worker)"
        )
    for name in _NON_NEGATIVE_INTS:
        if getattr(cfg, name) < 0:
            problems.append(f"{name}: {getattr(cfg, name)} must be >= 0")
    for name in _AT_LEAST_TWO_INTS:
        if getattr(cfg, name) < 2:
            problems.append(f"{name}: {getattr(cfg, name)} must be >= 2")
    if not 1 <= cfg.n_step <= MAX_N_STEP:
        problems.append(f"n_step: {cfg.n_step} must be in [1, {MAX_N_STEP}]")
    if cfg.sampling_lead_sgd_steps is not None and cfg.sampling_lead_sgd_steps < 0:
        problems.append(
            f"sampling_lead_sgd_steps: {cfg.sampling_lead_sgd_steps} must be >= 0 "
            "(or none: measured)"
        )
    for name in ("eval_every_env_steps", "early_num_epochs", "max_batch_size"):
        value = getattr(cfg, name)
        if value is not None and value < 1:
            problems.append(f"{name}: {value} must be >= 1 (or none)")
    if cfg.early_env_steps < 0:
        problems.append(f"early_env_steps: {cfg.early_env_steps} must be >= 0")
    for name in ("mlp_hidden_sizes", "critic_hidden_sizes"):
        if any(size < 1 for size in getattr(cfg, name) or ()):
            problems.append(f"{name}: {getattr(cfg, name)} must all be >= 1")
    problem = experiment_name_problem(cfg.experiment_name)
    if problem:
        problems.append(f"experiment: {cfg.experiment_name!r} {problem}")
    if not cfg.train_dir.strip():
        # An empty path is the working directory: experiments would land wherever it is.
        problems.append("train_dir: '' must be a folder path ('.' for the working directory)")
    return problems


# File systems allow 255 bytes per name; the experiment's lock file beside its folder,
# `.<experiment>.lock` (checkpoint/experiment_lock.py), takes 6 more than the folder.
MAX_EXPERIMENT_NAME_BYTES = 255 - 6


def experiment_name_problem(name: str) -> str | None:
    """Why `name` cannot name a folder directly inside train_dir, or None. Overwriting an
    experiment deletes its folder, so a name must never reach outside train_dir."""
    if not name.strip():
        return "must be a non-empty folder name"
    if name in (".", ".."):
        return "must name a folder inside train_dir, not train_dir or its parent"
    if any(c in name for c in ("/", "\\", "\0")):
        return "must be a single folder name (no '/', '\\' or NUL)"
    if name.startswith("~"):
        return "must not start with '~' (it is a folder name inside train_dir, not a path)"
    size = len(name.encode("utf-8", "surrogateescape"))
    if size > MAX_EXPERIMENT_NAME_BYTES:
        return (
            f"is {size} bytes long: at most {MAX_EXPERIMENT_NAME_BYTES} allowed (a file name "
            "has at most 255, and the experiment's lock file '.<name>.lock' adds 6)"
        )
    return None


def cross_field_problems(cfg: Config) -> list[str]:
    """Rules that tie several settings together."""
    problems = []
    if cfg.worker_num_splits >= 1 and cfg.num_envs_per_worker % cfg.worker_num_splits:
        problems.append(
            f"num_envs_per_worker ({cfg.num_envs_per_worker}) must be divisible by "
            f"worker_num_splits ({cfg.worker_num_splits})"
        )
    replay = ALGORITHM_FAMILIES.get(cfg.algorithm) in REPLAY_FAMILIES
    if cfg.rollout >= 1 and cfg.batch_size % cfg.rollout and not replay:
        problems.append(
            f"batch_size ({cfg.batch_size}) must be a multiple of rollout "
            f"({cfg.rollout}): minibatches hold whole trajectories"
        )
    if cfg.advantage_scale == "return_std" and not cfg.normalize_returns:
        problems.append(
            "advantage_scale 'return_std' divides by the running std of the returns: it needs "
            "normalize_returns true (or advantage_scale minibatch)"
        )
    in_float32 = all(abs(v) <= FLOAT32_MAX for v in (cfg.v_min, cfg.v_max))  # else reported
    if in_float32 and not cfg.v_min < cfg.v_max:
        problems.append(
            f"v_min ({cfg.v_min:g}) must be below v_max ({cfg.v_max:g}): they bound the "
            "categorical head's support"
        )
    if cfg.stop_on == "evaluation" and cfg.eval_every_env_steps is None:
        problems.append(
            "stop_on 'evaluation' judges stop_at_mean_return on evaluations: it needs "
            "eval_every_env_steps (e.g. 10000), or stop_on training"
        )
    if cfg.with_pbt and cfg.num_policies < 2:
        problems.append(
            f"with_pbt needs a population: num_policies ({cfg.num_policies}) must be >= 2"
        )
    if cfg.worker_cpu_affinity and not affinity_supported():
        problems.append(
            "worker_cpu_affinity true needs os.sched_setaffinity, which this platform lacks "
            "(Linux only): leave it false"
        )
    elif cfg.worker_cpu_affinity and cfg.serial_mode:
        problems.append(
            "worker_cpu_affinity true pins rollout worker processes, and serial_mode true runs "
            "none: set one of them false"
        )
    problems += _policy_mapping_problems(cfg)
    problems += _algorithm_problems(cfg)
    problems += _distributed_problems(cfg)
    problems += _dataset_growth_problems(cfg, replay)
    return problems


def _dataset_growth_problems(cfg: Config, replay: bool) -> list[str]:
    """What `max_batch_size` (datasets that grow with the learner's speed) needs."""
    largest = cfg.max_batch_size
    if largest is None or largest < 1:  # none, or reported as out of range
        return []
    if replay:
        return [
            f"max_batch_size ({largest}) grows datasets of fresh trajectories; algorithm "
            f"{cfg.algorithm!r} trains on replay batches of batch_size (leave it none)"
        ]
    if largest < cfg.batch_size or (cfg.rollout >= 1 and largest % cfg.rollout):
        return [
            f"max_batch_size ({largest}) must be at least batch_size ({cfg.batch_size}) and a "
            f"multiple of rollout ({cfg.rollout})"
        ]
    if cfg.serial_mode:
        return [
            f"max_batch_size ({largest}) grows datasets on the clock, and serial_mode true "
            "runs are reproducible: leave it none there"
        ]
    return []


def _distributed_problems(cfg: Config) -> list[str]:
    """What data-parallel training (`distributed`) cannot combine with, yet."""
    if not cfg.distributed:
        return (
            []
            if not 0.0 < cfg.sync_fraction < 1.0  # out of range: reported as such
            else [f"sync_fraction ({cfg.sync_fraction:g}) needs distributed true"]
        )
    refused = {
        "serial_mode": "every rank needs its own processes",
        "with_pbt": "a population across ranks runs on Ray Tune (sampleforge tune)",
        "batch_renorm": "batch renormalisation's batch statistics would differ per rank",
    }
    problems = [
        f"distributed: {name} true cannot be combined with it ({why})"
        for name, why in refused.items()
        if getattr(cfg, name)
    ]
    if cfg.sync_fraction < 1.0 and ALGORITHM_FAMILIES.get(cfg.algorithm) in REPLAY_FAMILIES:
        problems.append(
            f"sync_fraction ({cfg.sync_fraction:g}) applies to datasets of fresh trajectories; "
            f"algorithm {cfg.algorithm!r} trains on replay batches every rank has (use 1)"
        )
    return problems


# Families whose learners take part in PBT (hyperparameter mutation, copying a better policy)
# and whose policies are snapshotted as frozen opponents; other families' runs refuse both
# rather than ignore them.
_POPULATION_FAMILIES: tuple[FamilyName, ...] = ("actor_critic",)


def _algorithm_problems(cfg: Config) -> list[str]:
    """Settings the chosen algorithm cannot honour."""
    problems = []
    family = ALGORITHM_FAMILIES.get(cfg.algorithm)  # None: an unknown name, reported already
    if family is not None and family not in _POPULATION_FAMILIES:
        fit = ", ".join(a for f in _POPULATION_FAMILIES for a in family_algorithms(f))
        if cfg.with_pbt:
            problems.append(
                f"with_pbt: algorithm {cfg.algorithm!r} does not support population-based "
                f"training; use with_pbt false, or one of {fit}"
            )
        if cfg.num_frozen_opponents:
            problems.append(
                f"num_frozen_opponents: algorithm {cfg.algorithm!r} does not support frozen "
                f"opponents ({cfg.num_frozen_opponents} asked for); use 0 (num_policies > 1 "
                f"is fine), or one of {fit}"
            )
    if family not in (None, "actor_critic") and cfg.normalize_returns:
        problems.append(
            f"normalize_returns: algorithm {cfg.algorithm!r} does not normalise its value "
            f"targets; use false (true applies to {', '.join(family_algorithms('actor_critic'))})"
        )
    if family == "pqn" and cfg.q_head != "scalar":
        # PQN regresses one value per action on its Q(lambda) targets; a distribution has none.
        problems.append(
            f"q_head: algorithm 'pqn' learns scalar Q-values only; got {cfg.q_head!r}: use "
            "q_head scalar, or a replay algorithm (qrdqn, iqn, fqf, rainbow) for a distribution"
        )
    if family == "continuous_control" and cfg.learner_precision != "float32":
        problems.append(
            f"learner_precision: algorithm {cfg.algorithm!r} has no observation encoder to run "
            f"in {cfg.learner_precision}; use float32 ({cfg.learner_precision} applies to "
            f"{', '.join(a for a, f in ALGORITHM_FAMILIES.items() if f != family)})"
        )
    if family not in REPLAY_FAMILIES and cfg.learner_bootstrap_thread:
        problems.append(
            f"learner_bootstrap_thread: algorithm {cfg.algorithm!r} has no target-network "
            f"pass to run beside its update; use false (true applies to "
            f"{', '.join(a for f in REPLAY_FAMILIES for a in family_algorithms(f))})"
        )
    if cfg.learner_bootstrap_thread and cfg.learner_threads_adaptive:
        # torch fixes each thread's count at its first parallel op: the tuner's count would
        # reach the learner's main thread and never the bootstrap thread.
        problems.append(
            "learner_threads_adaptive true cannot be combined with learner_bootstrap_thread "
            "true (the bootstrap thread's torch threads would not follow the tuner): set one "
            "of them false"
        )
    if cfg.munchausen and cfg.q_head != "scalar":
        problems.append(
            f"munchausen applies to the scalar Q head only; got q_head {cfg.q_head!r} "
            f"(algorithm {cfg.algorithm!r}): use q_head scalar or munchausen false"
        )
    if cfg.munchausen and cfg.n_step != 1:
        # An n-step return would need the log-policy bonus of every step between, which the
        # replay does not store: the target would mix n rewards with one step's bonus.
        problems.append(
            f"n_step: munchausen's target is one-step (Vieillard et al. 2020); got n_step "
            f"{cfg.n_step} (algorithm {cfg.algorithm!r}): use n_step 1 or munchausen false"
        )
    return problems


def _policy_mapping_problems(cfg: Config) -> list[str]:
    from sampleforge.envs.policy_mapping import PolicyMapping, PolicyMappingError

    try:
        PolicyMapping(
            cfg.policy_mapping, cfg.num_policies, cfg.num_frozen_opponents, cfg.frozen_opponent_prob
        )
    except PolicyMappingError as e:
        return [str(e)]
    return []


def validate_config(cfg: Config) -> None:
    """Raise ConfigError listing every range and cross-field problem of `cfg` at once."""
    problems = range_problems(cfg)
    # PBT's bounds once every value is inside its own range: one line per bad value.
    problems += cross_field_problems(cfg) + (pbt_problems(cfg) if not problems else [])
    if problems:
        raise ConfigError(problems)
