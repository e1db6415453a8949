"""Population-based training (PBT): the decisions, as pure Python.

Responsible for: deciding *when* a PBT round happens (every ``period_env_steps`` env steps of
the whole population), ranking the policies by an objective (mean return, or win rate in
self-play), deciding which policies copy the weights and hyperparameters of which, mutating
hyperparameters, keeping the resulting per-policy hyperparameter table, and describing every
decision as a :class:`PbtEvent` (Sample Factory paper, appendix A.3.1).

Must not: import torch, touch processes, queues, learners or files. The caller carries the
decisions out (copies weights, sends new hyperparameters to learners, logs events, saves
:meth:`PopulationBasedTraining.state_dict` in checkpoints); :mod:`sampleforge.pbt.history`
writes the events to disk.

A round, in this order (replace first, then mutate, as Sample Factory does):

1. **Rank.** Policies with an objective are sorted by it; a policy whose objective is ``None``
   (no finished episode yet) or not finite is *unranked* and left completely alone this round:
   it neither copies, nor is copied, nor is mutated. Ties are broken by policy index, the lower
   index counting as the worse policy, so ranking never consumes randomness. With fewer than
   two ranked policies nothing happens.
2. **Replace.** Each policy in the worst group copies the weights and hyperparameters of a
   policy drawn uniformly at random from those policies of the best group whose objective
   exceeds its own by *more than* ``replace_threshold`` (an **absolute** gap, in objective
   units: a relative gap is ill-defined for returns near or below zero). No such policy, no
   copy. The groups are disjoint, so sources are unchanged by this step.
3. **Mutate.** Every policy in the bottom group (which contains the worst group, so a freshly
   copied policy gets mutated copies of its source's hyperparameters) has each of its
   hyperparameters independently mutated with probability ``mutation_probability``:
   multiplied or divided by ``mutation_factor`` with equal probability, then clamped to the
   hyperparameter's bounds. Adam's betas (``adam_beta1``, ``adam_beta2``) are mutated in the
   ``1 - beta`` space instead (``1 - beta`` is multiplied or divided), because what matters is
   the averaging horizon ``1 / (1 - beta)`` and because it keeps beta below 1.

Group sizes for ``M`` ranked policies (see :func:`group_sizes`), ``floor`` rounding:

* worst group = best group = ``floor(replace_fraction * M)``, at least 1 (when the fraction is
  positive) and at most ``M // 2``, so the two groups never overlap and a policy never copies
  from itself;
* bottom (mutated) group = ``floor(bottom_fraction_mutated * M)``, at least 1 (when the
  fraction is positive) and at least the worst group.

With the defaults (0.7, 0.3): M=1 -> nothing; M=2 -> 1 mutated, 1 copies the other; M=3 and
M=4 -> 2 mutated, 1 copies; M=5 -> 3, 1; M=8 -> 5, 2; M=10 -> 7, 3.

Randomness comes only from the object's own ``numpy.random.Generator``, drawn in a fixed order
(worst policy first; hyperparameters in sorted name order): per replaced policy one
``integers(len(candidates))`` over its candidates listed best first; per mutated policy and
hyperparameter one ``random()`` (mutate if ``< mutation_probability``) and, if mutated, one
more ``random()`` (``< 0.5`` -> multiply). A fixed seed therefore gives fixed decisions, and
the generator state is saved by :meth:`PopulationBasedTraining.state_dict`.

Schedule: :meth:`~PopulationBasedTraining.due` becomes true once ``env_steps`` reaches the
next multiple of ``period_env_steps``; a round then moves the next round to the first multiple
*strictly after* the round's ``env_steps``. If env steps jump past several boundaries, one
round happens, not one per boundary: repeated rounds on the same objectives would only compound
mutations on stale data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np

from sampleforge.config.ranges import PBT_BOUNDS

__all__ = [
    "DEFAULT_BOUNDS",
    "GroupSizes",
    "PbtEvent",
    "PbtSettings",
    "PopulationBasedTraining",
    "group_sizes",
    "mutate_value",
]

STATE_FORMAT = 1
"""Version of :meth:`PopulationBasedTraining.state_dict`'s layout."""

COMPLEMENT_SPACE = frozenset({"adam_beta1", "adam_beta2"})
"""Hyperparameters mutated through ``1 - value`` (averaging coefficients that must stay < 1)."""

DEFAULT_BOUNDS: Mapping[str, tuple[float, float]] = PBT_BOUNDS
"""Clamp bounds (inclusive) of the usual hyperparameters; others are unbounded unless
:attr:`PbtSettings.bounds` names them (reward-shaping coefficients may be negative)."""

# floor() of a product like 0.7 * 10 must not lose a whole policy to float rounding.
_FLOOR_EPSILON = 1e-9

EventKind = Literal["replace", "mutate"]


@dataclass(frozen=True)
class PbtSettings:
    """How often PBT runs and how aggressively it changes the population."""

    period_env_steps: int
    """A round happens every this many env steps of the whole population."""
    mutation_probability: float = 0.15
    """Probability that one hyperparameter of one bottom-group policy is mutated in a round."""
    mutation_factor: float = 1.2
    """A mutation multiplies or divides by this (``1 - beta`` for Adam's betas); > 1."""
    bottom_fraction_mutated: float = 0.7
    """Fraction of the ranked policies, from the worst, whose hyperparameters may mutate."""
    replace_fraction: float = 0.3
    """Fraction of ranked policies in the worst group (copiers) and in the best group
    (sources); at most 0.5 so the groups cannot overlap. 0 disables replacement."""
    replace_threshold: float = 0.0
    """A copy needs ``objective(source) - objective(copier) > replace_threshold`` (absolute)."""
    seed: int | None = None
    """Seed of the decision RNG; None draws fresh entropy (the state is still checkpointed)."""
    bounds: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Per-hyperparameter ``(low, high)`` clamp bounds, overriding :data:`DEFAULT_BOUNDS`."""

    def __post_init__(self) -> None:
        if self.period_env_steps <= 0:
            raise ValueError(f"period_env_steps must be > 0, got {self.period_env_steps}")
        if not 0.0 <= self.mutation_probability <= 1.0:
            raise ValueError(
                f"mutation_probability must be in [0, 1], got {self.mutation_probability}"
            )
        if not self.mutation_factor > 1.0:
            raise ValueError(f"mutation_factor must be > 1, got {self.mutation_factor}")
        if not 0.0 <= self.bottom_fraction_mutated <= 1.0:
            raise ValueError(
                f"bottom_fraction_mutated must be in [0, 1], got {self.bottom_fraction_mutated}"
            )
        if not 0.0 <= self.replace_fraction <= 0.5:
            raise ValueError(f"replace_fraction must be in [0, 0.5], got {self.replace_fraction}")
        if not self.replace_threshold >= 0.0:
            raise ValueError(f"replace_threshold must be >= 0, got {self.replace_threshold}")
        for name, (low, high) in self.effective_bounds().items():
            if not low <= high:
                raise ValueError(f"bounds of {name!r}: low {low} > high {high}")
            if name in COMPLEMENT_SPACE and not high < 1.0:
                raise ValueError(f"bounds of {name!r}: high must be < 1, got {high}")

    def effective_bounds(self) -> dict[str, tuple[float, float]]:
        """:data:`DEFAULT_BOUNDS` updated with :attr:`bounds`."""
        return {
            **DEFAULT_BOUNDS,
            **{k: (float(lo), float(hi)) for k, (lo, hi) in self.bounds.items()},
        }

    def bounds_of(self, name: str) -> tuple[float, float]:
        """Clamp bounds of hyperparameter ``name`` (``(-inf, inf)`` if none are known)."""
        return self.effective_bounds().get(name, (-math.inf, math.inf))


@dataclass(frozen=True)
class PbtEvent:
    """One decision of one round about one policy.

    ``kind == "replace"``: ``policy`` must load the weights of ``source_policy`` (as they are
    now); its hyperparameters became the source's. ``kind == "mutate"``: some hyperparameters
    of ``policy`` changed. ``changes`` maps each hyperparameter whose value changed to
    ``(old, new)`` (empty for a replacement whose source had the same values: the weights
    must still be copied). A policy replaced and then mutated in the same round gets two events, in
    that order. ``objectives`` is the round's snapshot for all policies (None = unranked).
    """

    round_index: int
    env_steps: int
    kind: EventKind
    policy: int
    source_policy: int | None
    changes: Mapping[str, tuple[float, float]]
    objectives: Mapping[int, float | None]

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (policy keys become strings, pairs become lists)."""
        return {
            "round_index": self.round_index,
            "env_steps": self.env_steps,
            "kind": self.kind,
            "policy": self.policy,
            "source_policy": self.source_policy,
            "changes": {name: [old, new] for name, (old, new) in self.changes.items()},
            "objectives": {str(p): obj for p, obj in self.objectives.items()},
        }

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> PbtEvent:
        """Inverse of :meth:`to_json_dict`."""
        kind = data["kind"]
        if kind not in ("replace", "mutate"):
            raise ValueError(f"unknown PBT event kind {kind!r}")
        source = data["source_policy"]
        return cls(
            round_index=int(data["round_index"]),
            env_steps=int(data["env_steps"]),
            kind=kind,
            policy=int(data["policy"]),
            source_policy=None if source is None else int(source),
            changes={
                name: (float(old), float(new)) for name, (old, new) in data["changes"].items()
            },
            objectives={
                int(p): None if obj is None else float(obj) for p, obj in data["objectives"].items()
            },
        )


class GroupSizes(NamedTuple):
    """How many ranked policies are in each group of a round."""

    num_mutated: int
    """Bottom group: the worst ``num_mutated`` policies may have hyperparameters mutated."""
    num_replaced: int
    """Size of both the worst group (copiers) and the best group (sources)."""


def group_sizes(
    num_ranked: int, bottom_fraction_mutated: float = 0.7, replace_fraction: float = 0.3
) -> GroupSizes:
    """Group sizes for ``num_ranked`` ranked policies (rounding rule in the module docstring)."""
    if num_ranked < 2:
        return GroupSizes(0, 0)
    num_replaced = 0
    if replace_fraction > 0:
        num_replaced = math.floor(replace_fraction * num_ranked + _FLOOR_EPSILON)
        # At least one, so that N=2 or 3 can still replace; at most half, so that the worst
        # and best groups are disjoint and nobody copies from itself.
        num_replaced = min(max(num_replaced, 1), num_ranked // 2)
    num_mutated = 0
    if bottom_fraction_mutated > 0:
        num_mutated = max(math.floor(bottom_fraction_mutated * num_ranked + _FLOOR_EPSILON), 1)
    # Copied hyperparameters are always mutated afterwards, so the worst group is a subset.
    num_mutated = min(max(num_mutated, num_replaced), num_ranked)
    return GroupSizes(num_mutated, num_replaced)


def mutate_value(
    name: str, value: float, multiply: bool, factor: float, bounds: tuple[float, float]
) -> float:
    """``value`` multiplied (``multiply``) or divided by ``factor``, clamped to ``bounds``.

    For Adam's betas the factor applies to ``1 - value``, so ``multiply`` *lowers* beta.
    """
    if name in COMPLEMENT_SPACE:
        complement = 1.0 - value
        new = 1.0 - (complement * factor if multiply else complement / factor)
    else:
        new = value * factor if multiply else value / factor
    low, high = bounds
    return min(max(new, low), high)


class PopulationBasedTraining:
    """The PBT schedule and decisions for a population of ``num_policies`` policies.

    Owns the hyperparameter table (policy -> name -> value) and the decision RNG. Every
    hyperparameter in the table is mutable; all policies must have the same names.
    """

    def __init__(
        self,
        settings: PbtSettings,
        num_policies: int,
        initial_hyperparameters: Mapping[int, Mapping[str, float]],
    ) -> None:
        """``initial_hyperparameters`` must have exactly the keys ``0 .. num_policies - 1``,
        each with the same hyperparameter names, each value within its bounds."""
        if num_policies < 1:
            raise ValueError(f"num_policies must be >= 1, got {num_policies}")
        self.settings = settings
        self.num_policies = num_policies
        self._table = self._checked_table(initial_hyperparameters)
        self._rng = np.random.default_rng(settings.seed)
        self._next_round_env_steps = settings.period_env_steps
        self._last_round_env_steps: int | None = None
        self._rounds = 0

    # --- queries ------------------------------------------------------------------------------
    def due(self, env_steps: int) -> bool:
        """True if ``env_steps`` has reached the next round's boundary."""
        return env_steps >= self._next_round_env_steps

    @property
    def next_round_env_steps(self) -> int:
        """Env steps at which the next round becomes due."""
        return self._next_round_env_steps

    @property
    def rounds(self) -> int:
        """Number of rounds run so far (including rounds in which nothing changed)."""
        return self._rounds

    def hyperparameters(self, policy: int) -> dict[str, float]:
        """A copy of the current hyperparameters of ``policy``."""
        self._check_policy(policy)
        return dict(self._table[policy])

    # --- the round ----------------------------------------------------------------------------
    def step(self, env_steps: int, objectives: Mapping[int, float | None]) -> list[PbtEvent]:
        """Run one round if one is due (else do nothing and return ``[]``).

        ``objectives`` maps policies to their objective; a missing policy counts as None.
        Updates the hyperparameter table, moves the schedule on, and returns the round's events
        (all replacements, worst first, then all mutations, worst first).
        """
        for policy in objectives:
            self._check_policy(policy)
        if not self.due(env_steps):
            return []
        snapshot = {p: _finite_or_none(objectives.get(p)) for p in range(self.num_policies)}
        round_index = self._rounds
        self._rounds += 1
        self._last_round_env_steps = env_steps
        period = self.settings.period_env_steps
        self._next_round_env_steps = (env_steps // period + 1) * period

        scores = {p: obj for p, obj in snapshot.items() if obj is not None}
        ranked = _rank(scores)  # worst first
        sizes = group_sizes(
            len(ranked), self.settings.bottom_fraction_mutated, self.settings.replace_fraction
        )

        def event(kind: EventKind, policy: int, source: int | None, changes: dict) -> PbtEvent:
            return PbtEvent(round_index, env_steps, kind, policy, source, changes, snapshot)

        events = []
        for policy, source, changes in self._replace(ranked, scores, sizes.num_replaced):
            events.append(event("replace", policy, source, changes))
        for policy in ranked[: sizes.num_mutated]:
            changes = self._mutate(policy)
            if changes:
                events.append(event("mutate", policy, None, changes))
        return events

    def _replace(
        self, ranked: list[int], scores: Mapping[int, float], count: int
    ) -> list[tuple[int, int, dict[str, tuple[float, float]]]]:
        """Copy hyperparameters from a best-group policy into each worst-group policy."""
        if count == 0:
            return []
        worst = ranked[:count]
        best = ranked[::-1][:count]  # best first
        threshold = self.settings.replace_threshold
        result = []
        for policy in worst:
            candidates = [p for p in best if scores[p] - scores[policy] > threshold]
            if not candidates:
                continue
            source = candidates[int(self._rng.integers(len(candidates)))]
            old = self._table[policy]
            # The groups are disjoint, so a source is never itself overwritten this round.
            new = dict(self._table[source])
            self._table[policy] = new
            result.append((policy, source, _changes(old, new)))
        return result

    def _mutate(self, policy: int) -> dict[str, tuple[float, float]]:
        """Mutate each hyperparameter of ``policy`` with the mutation probability."""
        settings = self.settings
        values = self._table[policy]
        changes = {}
        for name in sorted(values):
            if self._rng.random() >= settings.mutation_probability:
                continue
            multiply = bool(self._rng.random() < 0.5)
            old = values[name]
            new = mutate_value(
                name, old, multiply, settings.mutation_factor, settings.bounds_of(name)
            )
            # Clamping at a bound can leave the value unchanged: that is not a change.
            if new != old:
                values[name] = new
                changes[name] = (old, new)
        return changes

    # --- persistence --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state: schedule, hyperparameter table and RNG state."""
        return {
            "format": STATE_FORMAT,
            "num_policies": self.num_policies,
            "rounds": self._rounds,
            "next_round_env_steps": self._next_round_env_steps,
            "last_round_env_steps": self._last_round_env_steps,
            "hyperparameters": {str(p): dict(v) for p, v in self._table.items()},
            "rng": _jsonable_rng_state(self._rng.bit_generator.state),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; the schedule and future decisions continue
        exactly where they left off (settings are not part of the state)."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"unsupported PBT state format {state.get('format')!r}")
        if state["num_policies"] != self.num_policies:
            raise ValueError(
                f"PBT state is for {state['num_policies']} policies, not {self.num_policies}"
            )
        table = self._checked_table(
            {int(p): values for p, values in state["hyperparameters"].items()}
        )
        self._rng.bit_generator.state = state["rng"]
        self._table = table
        self._rounds = int(state["rounds"])
        self._next_round_env_steps = int(state["next_round_env_steps"])
        last = state["last_round_env_steps"]
        self._last_round_env_steps = None if last is None else int(last)

    # --- helpers ------------------------------------------------------------------------------
    def _check_policy(self, policy: int) -> None:
        if not 0 <= policy < self.num_policies:
            raise ValueError(f"policy {policy} is not in 0..{self.num_policies - 1}")

    def _checked_table(
        self, table: Mapping[int, Mapping[str, float]]
    ) -> dict[int, dict[str, float]]:
        """A validated deep copy of a hyperparameter table."""
        if set(table) != set(range(self.num_policies)):
            raise ValueError(
                f"hyperparameters must be given for policies 0..{self.num_policies - 1}, "
                f"got {sorted(table)}"
            )
        names = set(table[0])
        result = {}
        for policy in range(self.num_policies):
            values = {name: float(value) for name, value in table[policy].items()}
            # Replacement copies whole rows, so every row must have the same names.
            if set(values) != names:
                raise ValueError(
                    f"policy {policy} has hyperparameters {sorted(values)}, "
                    f"policy 0 has {sorted(names)}"
                )
            for name, value in values.items():
                low, high = self.settings.bounds_of(name)
                if not low <= value <= high:
                    raise ValueError(
                        f"policy {policy}: {name}={value} is outside its bounds [{low}, {high}]"
                    )
            result[policy] = values
        return result


def _finite_or_none(objective: float | None) -> float | None:
    """The objective as a float, or None if missing or not finite (NaN cannot be ranked)."""
    if objective is None:
        return None
    objective = float(objective)
    return objective if math.isfinite(objective) else None


def _rank(scores: Mapping[int, float]) -> list[int]:
    """Ranked policies, worst first; ties: the lower policy index counts as worse."""
    return sorted(scores, key=lambda p: (scores[p], p))


def _changes(old: Mapping[str, float], new: Mapping[str, float]) -> dict[str, tuple[float, float]]:
    """``name -> (old, new)`` for every value that differs."""
    return {name: (old[name], new[name]) for name in sorted(new) if old[name] != new[name]}


def _jsonable_rng_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """The bit generator state with numpy scalars/arrays turned into plain Python values."""

    def convert(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: convert(v) for k, v in value.items()}
        if isinstance(value, np.ndarray):
            return value.tolist()
        if isinstance(value, np.generic):
            return value.item()
        return value

    return convert(state)
