"""Which policy plays each agent seat of an env, decided afresh at the start of every episode.

Policies `0 .. num_policies - 1` are trained; policies `num_policies .. num_policies +
num_frozen - 1` are frozen opponents (snapshots of trained policies, never trained).

- `random` (default): every seat gets a trained policy drawn uniformly; with several seats,
  each seat after the first is instead a frozen opponent with probability
  `frozen_opponent_prob` (if there are any). Seat 0 is always a trained policy, so every env
  produces training data.
- `seat`: seat `a` is played by trained policy `a % num_policies` (fixed match-ups).
- `package.module:function`: your own, called as `function(env_index, seat, num_policies,
  num_frozen, rng) -> policy id` for each seat, with `env_index` the env's global index and
  `rng` a `numpy.random.Generator` private to the rollout worker.

Must not: know about queues, buffers or processes; it only draws numbers.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

BUILT_IN_MAPPINGS = ("random", "seat")

MappingFunction = Callable[[int, int, int, int, np.random.Generator], int]


class PolicyMappingError(ValueError):
    """The policy mapping is not a built-in name or an importable function, or returned a bad id."""


@dataclass(frozen=True)
class PolicyMapping:
    """Assigns policies to the seats of an env (picklable: rollout workers get a copy)."""

    name: str
    num_policies: int
    num_frozen: int = 0
    frozen_opponent_prob: float = 0.0

    def __post_init__(self) -> None:
        if self.name not in BUILT_IN_MAPPINGS:
            load_mapping_function(self.name)  # fail now, not in a worker

    def assign(self, env_index: int, seats: int, rng: np.random.Generator) -> np.ndarray:
        """Policy ids for the `seats` seats of env `env_index`."""
        if self.name == "random":
            ids = rng.integers(self.num_policies, size=seats)
            if self.num_frozen and seats > 1:
                frozen = rng.random(seats) < self.frozen_opponent_prob
                frozen[0] = False
                ids = np.where(
                    frozen, self.num_policies + rng.integers(self.num_frozen, size=seats), ids
                )
            return ids.astype(np.int32)
        if self.name == "seat":
            return (np.arange(seats) % self.num_policies).astype(np.int32)
        return self._custom(env_index, seats, rng)

    def _custom(self, env_index: int, seats: int, rng: np.random.Generator) -> np.ndarray:
        fn = load_mapping_function(self.name)
        total = self.num_policies + self.num_frozen
        ids = [
            int(fn(env_index, seat, self.num_policies, self.num_frozen, rng))
            for seat in range(seats)
        ]
        bad = [i for i in ids if not 0 <= i < total]
        if bad:
            raise PolicyMappingError(
                f"policy mapping {self.name!r} returned policy {bad[0]}; allowed: 0..{total - 1}"
            )
        return np.asarray(ids, dtype=np.int32)


def load_mapping_function(path: str) -> MappingFunction:
    """Import `package.module:function`."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise PolicyMappingError(
            f"policy_mapping {path!r} is neither one of "
            f"{', '.join(BUILT_IN_MAPPINGS)} nor 'package.module:function'"
        )
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise PolicyMappingError(f"policy_mapping {path!r} cannot be imported: {e}") from None
    if not callable(fn):
        raise PolicyMappingError(f"policy_mapping {path!r} is not a function")
    return fn
