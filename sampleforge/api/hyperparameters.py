"""The hyperparameters an outside driver may change between `train` calls, and their checks.

Which names an algorithm's learner can change during a run is its learner module's business
(`HYPERPARAMETERS` there, read through `learners/registry.py: learner_hyperparameters`); every
one is a `Config` field, so a value must lie where that setting may (`config/ranges.py`). The
checks run in the caller's process, before anything is sent: a learner that received a name it
does not know would fail, and the run with it.

Must not: send anything, or know any family's names itself.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from typing import Any

from sampleforge.config import Config, ConfigError, validate_config
from sampleforge.learners.registry import learner_hyperparameters


def starting_hyperparameters(cfg: Config) -> dict[str, float]:
    """The values the learner of `cfg.algorithm` starts with: the config's."""
    return {name: float(getattr(cfg, name)) for name in learner_hyperparameters(cfg.algorithm)}


def check_hyperparameters(cfg: Config, values: Mapping[str, float]) -> dict[str, float]:
    """`values` as floats, once every name is one `cfg.algorithm`'s learner can change and every
    value is a number its setting allows; else a one-line ValueError naming the first problem
    and what is allowed."""
    allowed = learner_hyperparameters(cfg.algorithm)
    if not isinstance(values, Mapping) or not values:
        raise ValueError(
            f"set_hyperparameters: expected a non-empty {{name: value}} mapping, got {values!r} "
            f"(names for {cfg.algorithm}: {', '.join(allowed)})"
        )
    checked: dict[str, float] = {}
    for name, value in values.items():
        if name not in allowed:
            raise ValueError(
                f"set_hyperparameters: {name!r} cannot be changed during a {cfg.algorithm} run "
                f"(allowed: {', '.join(allowed)})"
            )
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"set_hyperparameters: {name}: expected a number, got {value!r}")
        checked[name] = float(value)
    try:  # the ranges of the settings themselves, as the config was validated
        changed: dict[str, Any] = dict(checked)  # every name is a float field of Config
        validate_config(dataclasses.replace(cfg, **changed))
    except ConfigError as err:
        raise ValueError(f"set_hyperparameters: {'; '.join(err.problems)}") from None
    return checked
