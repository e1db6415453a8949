"""Where each float setting and the seed must lie, and the problems of a config that strays.

Every float setting of the schema, including ones added later, must be a finite number within
float32's range: the learner's tensor math is float32, where torch raises on a clip threshold
beyond that range and an infinite learning rate or Adam epsilon silently ruins or stalls
training. Only the settings in `INFINITY_ALLOWED` may be infinite. Settings with a narrower
range list it in `FLOAT_RANGES`. The seed must leave every seed derived from it (per policy
and per worker) inside the range that numpy's and torch's generators take.

Must not: import torch, numpy or anything outside `config`; messages name the field, the value
and what is allowed, on one line.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from dataclasses import dataclass

from sampleforge.config.schema import Config, config_fields

# Float settings that may be infinite: stop_at_mean_return inf never stops on the return
# (the API's default), -inf stops at the first report. Every other float feeds float32
# tensor math or a clock, where inf is either a crash or a setting that does nothing.
INFINITY_ALLOWED = frozenset({"stop_at_mean_return"})
# The largest float32 (numpy.finfo(numpy.float32).max).
FLOAT32_MAX = 3.4028234663852886e38


@dataclass(frozen=True)
class FloatRange:
    """The interval a float setting must lie in (None: unbounded on that side), and why an
    upper bound exists."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    why: str = ""

    def __contains__(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return True

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"in {left}{self.low:g}, {self.high:g}{right}"


_POSITIVE = FloatRange(0.0, low_open=True)
_NON_NEGATIVE = FloatRange(0.0)
_UNIT = FloatRange(0.0, 1.0)
# torch's Adam refuses beta = 1 (its bias correction would divide by 1 - 1**t = 0).
_BETA = FloatRange(0.0, 1.0, high_open=True)
_LOSS_WEIGHT = FloatRange(0.0, 1e3, why="a loss weight; larger ones swamp every other term")

# What PBT mutates in the learners, and the bounds (inclusive) it keeps every hyperparameter
# within: narrower than the settings accept, so that no mutation reaches a value that breaks a
# run. A run's own starting value must lie inside them (`pbt_problems`).
PBT_LEARNER_HYPERPARAMETERS = ("learning_rate", "entropy_coeff", "adam_beta1")
PBT_BOUNDS: dict[str, tuple[float, float]] = {
    "learning_rate": (1e-7, 1e-1),
    "entropy_coeff": (0.0, 1.0),
    "adam_beta1": (0.0, 0.999),
    "adam_beta2": (0.0, 0.99999),
}

FLOAT_RANGES: dict[str, FloatRange] = {
    "frozen_opponent_prob": _UNIT,
    "pbt_replace_threshold": _NON_NEGATIVE,
    "pbt_mutation_probability": _UNIT,
    "pbt_mutation_factor": FloatRange(1.0, low_open=True),
    "train_for_seconds": _POSITIVE,
    "learning_rate": FloatRange(
        0.0, 1.0, low_open=True, why="Adam moves each weight by up to about this much a step"
    ),
    "adam_beta1": _BETA,
    "adam_beta2": _BETA,
    "adam_eps": FloatRange(
        0.0, 1.0, low_open=True, why="a larger one shrinks every Adam step towards zero"
    ),
    "max_grad_norm": _NON_NEGATIVE,
    "gamma": _UNIT,
    # --- actor-critic (`algo/actor_critic_loss.py: check_settings` relies on these) ---------
    "gae_lambda": _UNIT,
    "vtrace_rho_bar": _POSITIVE,
    "vtrace_c_bar": _POSITIVE,
    "ppo_clip_ratio": _POSITIVE,
    "ppo_dual_clip": FloatRange(1.0, low_open=True),
    "value_clip": _POSITIVE,
    "value_loss_coeff": _LOSS_WEIGHT,
    "entropy_coeff": _LOSS_WEIGHT,
    # --- the replay families (`algo/replay_settings.py: ReplaySettings`) --------------------
    "samples_per_insert": _POSITIVE,
    "target_tau": FloatRange(0.0, 1.0, low_open=True),
    "priority_alpha": _NON_NEGATIVE,
    "priority_beta": _UNIT,
    # --- value-based (`algo/value_settings.py: ValueSettings`) -----------------------------
    "epsilon_start": _UNIT,
    "epsilon_end": _UNIT,
    "epsilon_ladder_base": _UNIT,
    "epsilon_ladder_alpha": _NON_NEGATIVE,
    "fraction_lr": _NON_NEGATIVE,
    "munchausen_alpha": _UNIT,
    "munchausen_tau": _POSITIVE,
    "munchausen_clip": FloatRange(high=0.0, high_open=True),
    "q_lambda": _UNIT,
    # --- continuous control (`algo/continuous_settings.py: ContinuousSettings`) ------------
    "actor_learning_rate": FloatRange(
        0.0, 1.0, low_open=True, why="Adam moves each weight by up to about this much a step"
    ),
    "exploration_noise": _NON_NEGATIVE,
    "target_policy_noise": _NON_NEGATIVE,
    "target_noise_clip": _NON_NEGATIVE,
    "entropy_temperature": _POSITIVE,
    "batch_renorm_momentum": FloatRange(0.0, 1.0, low_open=True),
    # --- the rest of the learner -----------------------------------------------------------
    "reward_scale": FloatRange(
        0.0, 1e6, low_open=True, why="larger ones overflow float32 rewards and returns"
    ),
    "reward_clip": _POSITIVE,
    "env_step_timeout_sec": _POSITIVE,
    "report_every_sec": _POSITIVE,
    "save_every_sec": _POSITIVE,
    "distributed_timeout_sec": _POSITIVE,
    "sync_fraction": FloatRange(0.0, 1.0, low_open=True),
}


def float_fields() -> list[str]:
    """Names of the schema's float settings (Optional[float] included)."""
    hints = config_hints()
    return [f.name for f in config_fields() if _without_none(hints[f.name]) is float]


def _without_none(annotation: object) -> object:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        return next(a for a in args if a is not type(None))
    return annotation


def allowed(name: str) -> str:
    """What a float setting may be, in words."""
    if name in INFINITY_ALLOWED:
        return "a number, inf or -inf"
    in_range = FLOAT_RANGES.get(name)
    return (
        f"a finite number {in_range}" if in_range else f"a finite number within +-{FLOAT32_MAX:.4g}"
    )


def float_problems(cfg: Config) -> list[str]:
    """A line for each float setting that is NaN, infinite, beyond float32 or out of its
    range (None, where a field takes it, is for the caller's own checks)."""
    problems = []
    for name in float_fields():
        value = getattr(cfg, name)
        if value is None:
            continue
        none = " (or none)" if _optional(name) else ""
        if math.isnan(value) or (
            name not in INFINITY_ALLOWED and (math.isinf(value) or abs(value) > FLOAT32_MAX)
        ):
            or_none = ", or none" if none else ""
            problems.append(f"{name}: {value:g} is not allowed (allowed: {allowed(name)}{or_none})")
        elif name in INFINITY_ALLOWED:
            continue
        elif name in FLOAT_RANGES and value not in FLOAT_RANGES[name]:
            in_range = FLOAT_RANGES[name]
            why = f" ({in_range.why})" if in_range.why else ""
            problems.append(f"{name}: {value:g} must be {in_range}{none}{why}")
    return problems


def _optional(name: str) -> bool:
    annotation = config_hints()[name]
    return _without_none(annotation) is not annotation


@functools.lru_cache(maxsize=1)
def config_hints() -> dict[str, typing.Any]:
    """Config's resolved annotations (resolving them costs milliseconds per call; callers
    must not change the dict)."""
    return typing.get_type_hints(Config)


# [0, 2**32) is the range every seed of numpy (legacy `seed`) and torch is safe in.
SEED_LIMIT = 2**32
LEARNER_SEED_STRIDE = 7919
INFERENCE_SEED_STRIDE = 1000


def learner_seed(seed: int, policy_id: int) -> int:
    """The learner's torch seed: the same initial weights for the same seed, different ones
    across the population."""
    return seed + LEARNER_SEED_STRIDE * policy_id


def inference_seed(seed: int, policy_id: int, index: int) -> int:
    """An inference worker's torch seed: action sampling differs per worker, repeatably."""
    return seed + INFERENCE_SEED_STRIDE * (policy_id + 1) + index


def largest_seed_offset(cfg: Config) -> int:
    """How far above `seed` the largest seed derived from it lies: the last learner's torch
    seed, or that of the last inference worker of the last acting policy (frozen snapshots
    included). Per-env seeds are hashed from `seed` (`envs.registry.env_seed`), and rollout
    workers seed numpy with [seed, worker], so those fit whatever the seed."""
    last_acting = cfg.num_policies + cfg.num_frozen_opponents - 1
    return max(
        learner_seed(0, cfg.num_policies - 1),
        inference_seed(0, last_acting, cfg.num_inference_workers - 1),
    )


def seed_problems(cfg: Config) -> list[str]:
    """`seed`, and every seed derived from it, must fit numpy's and torch's generators."""
    if cfg.seed is None:
        return []
    offset = largest_seed_offset(cfg)
    highest = SEED_LIMIT - 1 - offset
    if 0 <= cfg.seed <= highest:
        return []
    return [
        f"seed: {cfg.seed} must be in [0, {highest}] (or none: random): the seeds derived "
        f"for each policy and worker add up to {offset} to it, and must stay below 2**32"
    ]


def pbt_problems(cfg: Config) -> list[str]:
    """With `with_pbt`, each hyperparameter PBT mutates must start inside PBT's bounds."""
    if not cfg.with_pbt:
        return []
    problems = []
    for name in PBT_LEARNER_HYPERPARAMETERS:
        value = getattr(cfg, name)
        low, high = PBT_BOUNDS[name]
        if not low <= value <= high:
            problems.append(
                f"{name}: {value:g} is outside [{low:g}, {high:g}], the bounds PBT keeps it "
                "within (with_pbt true)"
            )
    return problems
