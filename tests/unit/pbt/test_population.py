"""Tests of the PBT decision logic (sampleforge.pbt.population) and its history file."""

from __future__ import annotations

import json
import math
import warnings

import pytest

from sampleforge.pbt import (
    HISTORY_FILENAME,
    PbtEvent,
    PbtHistory,
    PbtSettings,
    PopulationBasedTraining,
    group_sizes,
    mutate_value,
)

PERIOD = 1000
FACTOR = 1.2


def distinct_table(n: int) -> dict[int, dict[str, float]]:
    """Different values per policy, so that a copy is visible in the table."""
    return {
        p: {
            "learning_rate": 1e-4 * (p + 1),
            "entropy_coeff": 0.001 * (p + 1),
            "adam_beta1": 0.9,
            "shaping.hit": float(p + 1),
        }
        for p in range(n)
    }


def make(n: int, table: dict | None = None, **settings) -> PopulationBasedTraining:
    settings.setdefault("seed", 0)
    return PopulationBasedTraining(
        PbtSettings(period_env_steps=PERIOD, **settings), n, table or distinct_table(n)
    )


def direction(name: str, old: float, new: float) -> str:
    """'*' if the mutation multiplied (1 - beta for betas) by FACTOR, '/' if it divided."""
    if name == "adam_beta1":
        old, new = 1.0 - old, 1.0 - new
    ratio = new / old
    if ratio == pytest.approx(FACTOR, rel=1e-12):
        return "*"
    if ratio == pytest.approx(1.0 / FACTOR, rel=1e-12):
        return "/"
    raise AssertionError(f"{name}: {old} -> {new} is not x{FACTOR} or /{FACTOR}")


def summarize(events: list[PbtEvent]) -> list[tuple]:
    """(kind, policy, source) for replacements, (kind, policy, {name: '*' or '/'}) for mutations."""
    out = []
    for e in events:
        if e.kind == "replace":
            out.append(("replace", e.policy, e.source_policy))
        else:
            out.append(
                ("mutate", e.policy, {k: direction(k, *change) for k, change in e.changes.items()})
            )
    return out


# --- group sizes ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "n, mutated, replaced",
    [(1, 0, 0), (2, 1, 1), (3, 2, 1), (4, 2, 1), (5, 3, 1), (8, 5, 2), (10, 7, 3)],
)
def test_group_sizes_follow_the_floor_rule(n: int, mutated: int, replaced: int) -> None:
    assert group_sizes(n, 0.7, 0.3) == (mutated, replaced)


def test_group_sizes_invariants_for_many_population_sizes() -> None:
    for n in range(2, 60):
        sizes = group_sizes(n)
        assert 1 <= sizes.num_replaced <= n // 2  # worst and best groups are disjoint
        assert sizes.num_replaced <= sizes.num_mutated < n  # the best policy is never mutated
    assert group_sizes(10, 0.7, 0.0) == (7, 0)  # replacement disabled
    assert group_sizes(10, 0.0, 0.3) == (3, 3)  # the copiers are still mutated


def test_single_policy_nothing_happens_but_the_schedule_moves_on() -> None:
    pbt = make(1, mutation_probability=1.0)
    assert pbt.step(PERIOD, {0: 5.0}) == []
    assert pbt.hyperparameters(0) == distinct_table(1)[0]
    assert pbt.rounds == 1 and not pbt.due(PERIOD)


def test_with_two_policies_the_worse_copies_the_better() -> None:
    pbt = make(2, mutation_probability=0.0)
    events = pbt.step(PERIOD, {0: 10.0, 1: 3.0})
    assert summarize(events) == [("replace", 1, 0)]
    assert pbt.hyperparameters(1) == distinct_table(2)[0]
    assert pbt.hyperparameters(0) == distinct_table(2)[0]
    assert events[0].changes["shaping.hit"] == (2.0, 1.0)


# --- exact decisions with a fixed seed --------------------------------------------------------
def test_exact_decisions_n4() -> None:
    # Worst first: 1 (1.0), 3 (2.0), 0 (3.0), 2 (4.0). Worst group [1], best group [2],
    # bottom group [1, 3]; which hyperparameters mutate, and how, comes from seed 42.
    pbt = make(4, seed=42, mutation_probability=0.5)
    events = pbt.step(PERIOD, {0: 3.0, 1: 1.0, 2: 4.0, 3: 2.0})
    assert summarize(events) == [
        ("replace", 1, 2),
        ("mutate", 1, {"entropy_coeff": "/", "shaping.hit": "/"}),
        ("mutate", 3, {"learning_rate": "*", "shaping.hit": "/"}),
    ]
    # The copier's mutations start from the copied values.
    assert pbt.hyperparameters(1) == pytest.approx(
        {
            "learning_rate": 3e-4,
            "entropy_coeff": 0.003 / FACTOR,
            "adam_beta1": 0.9,
            "shaping.hit": 3.0 / FACTOR,
        }
    )
    assert pbt.hyperparameters(0) == distinct_table(4)[0]  # middle: untouched
    assert pbt.hyperparameters(2) == distinct_table(4)[2]  # best: untouched


def test_exact_decisions_n8() -> None:
    # Worst first: 1, 5, 3, 7, 6, 0, 4, 2. Worst group [1, 5], best group [2, 4],
    # bottom group [1, 5, 3, 7, 6]; the sources and mutations come from seed 42.
    pbt = make(8, seed=42, mutation_probability=0.5)
    objectives = {0: 5.0, 1: 0.0, 2: 7.0, 3: 2.0, 4: 6.0, 5: 1.0, 6: 4.0, 7: 3.0}
    events = pbt.step(PERIOD, objectives)
    assert summarize(events) == [
        ("replace", 1, 2),
        ("replace", 5, 4),
        ("mutate", 1, {"adam_beta1": "/", "learning_rate": "/"}),
        ("mutate", 5, {"entropy_coeff": "*", "learning_rate": "/"}),
        ("mutate", 3, {"entropy_coeff": "*", "shaping.hit": "/"}),
        ("mutate", 7, {"learning_rate": "/"}),
        ("mutate", 6, {"entropy_coeff": "*", "learning_rate": "*"}),
    ]
    assert all(e.objectives == objectives and e.env_steps == PERIOD for e in events)
    assert pbt.hyperparameters(1)["adam_beta1"] == pytest.approx(1 - 0.1 / FACTOR)


def test_same_seed_same_decisions_different_seed_different_decisions() -> None:
    objectives = {p: float(p) for p in range(8)}

    def run(seed: int) -> list[list[tuple]]:
        pbt = make(8, seed=seed)
        return [summarize(pbt.step(PERIOD * r, objectives)) for r in range(1, 20)]

    assert run(3) == run(3)
    assert run(3) != run(4)


# --- mutation ---------------------------------------------------------------------------------
def test_mutations_are_exactly_times_or_divided_by_the_factor() -> None:
    pbt = make(10, mutation_probability=1.0, replace_fraction=0.0)
    events = pbt.step(PERIOD, {p: float(p) for p in range(10)})
    # Probability 1: every hyperparameter of each of the bottom 7 changes, the top 3 do not.
    assert [e.policy for e in events] == list(range(7))
    seen = set()
    for e in events:
        assert set(e.changes) == {"learning_rate", "entropy_coeff", "adam_beta1", "shaping.hit"}
        for name, (old, new) in e.changes.items():
            seen.add((name, direction(name, old, new)))
    assert len(seen) == 8  # both directions of every hyperparameter occurred
    for p in range(7, 10):
        assert pbt.hyperparameters(p) == distinct_table(10)[p]


def test_adam_beta1_moves_in_one_minus_beta_space_and_stays_below_one() -> None:
    assert mutate_value("adam_beta1", 0.9, True, FACTOR, (0.0, 0.999)) == pytest.approx(0.88)
    assert mutate_value("adam_beta1", 0.9, False, FACTOR, (0.0, 0.999)) == pytest.approx(
        1 - 0.1 / FACTOR
    )
    table = {p: {"adam_beta1": 0.998} for p in range(4)}
    pbt = make(4, table=table, mutation_probability=1.0)
    for r in range(1, 200):
        pbt.step(PERIOD * r, {p: float(p) for p in range(4)})
        for p in range(4):
            assert 0.0 <= pbt.hyperparameters(p)["adam_beta1"] <= 0.999


def test_mutations_are_clamped_to_bounds() -> None:
    assert mutate_value("learning_rate", 0.09, True, FACTOR, (1e-7, 0.1)) == 0.1
    assert mutate_value("shaping.hit", -1.0, True, FACTOR, (-2.0, 0.0)) == pytest.approx(-1.2)
    assert mutate_value("shaping.hit", -1.9, True, FACTOR, (-2.0, 0.0)) == -2.0
    bounds = {"shaping.hit": (0.5, 2.0)}
    table = {p: {"learning_rate": 0.1, "shaping.hit": 1.0} for p in range(4)}
    pbt = make(4, table=table, mutation_probability=1.0, bounds=bounds)
    for r in range(1, 200):
        for e in pbt.step(PERIOD * r, {p: float(p) for p in range(4)}):
            for old, new in e.changes.values():
                assert old != new  # a value clamped in place is not reported as a change
        for p in range(4):
            values = pbt.hyperparameters(p)
            assert 1e-7 <= values["learning_rate"] <= 0.1
            assert 0.5 <= values["shaping.hit"] <= 2.0


def test_each_hyperparameter_mutates_about_fifteen_percent_of_the_time() -> None:
    rounds, n = 600, 10
    pbt = make(
        n,
        replace_fraction=0.0,
        bounds={
            "learning_rate": (1e-300, 1e300),
            "entropy_coeff": (0.0, 1e300),
            "adam_beta1": (-1e300, 0.999999999),
        },
    )
    names = ("learning_rate", "entropy_coeff", "adam_beta1", "shaping.hit")
    mutated = dict.fromkeys(names, 0)
    multiplied = 0
    for r in range(1, rounds + 1):
        for e in pbt.step(PERIOD * r, {p: float(p) for p in range(n)}):
            assert e.kind == "mutate" and e.policy < 7  # the top 3 are never mutated
            for name, (old, new) in e.changes.items():
                mutated[name] += 1
                multiplied += direction(name, old, new) == "*"
    opportunities = 7 * rounds  # 4200; expected 630 mutations each, std ~23
    for name in names:
        assert 0.12 < mutated[name] / opportunities < 0.18, (name, mutated[name])
    assert 0.45 < multiplied / sum(mutated.values()) < 0.55


# --- replacement ------------------------------------------------------------------------------
def test_threshold_blocks_replacement_when_the_gap_is_small() -> None:
    objectives = {0: 0.0, 1: 0.4, 2: 0.6, 3: 1.0}
    blocked = make(4, mutation_probability=0.0, replace_threshold=1.0)  # gap == 1.0: not more
    assert blocked.step(PERIOD, objectives) == []
    assert blocked.hyperparameters(0) == distinct_table(4)[0]
    allowed = make(4, mutation_probability=0.0, replace_threshold=0.99)
    assert summarize(allowed.step(PERIOD, objectives)) == [("replace", 0, 3)]


def test_threshold_restricts_the_sources_to_policies_far_enough_ahead() -> None:
    # Best group [2 (10.0), 7 (5.0)]; for copier 0 (4.5) only policy 2 beats it by > 1.
    objectives = {0: 4.5, 1: 4.6, 2: 10.0, 3: 4.7, 4: 4.8, 5: 4.9, 6: 4.95, 7: 5.0}
    for seed in range(20):
        pbt = make(8, seed=seed, mutation_probability=0.0, replace_threshold=1.0)
        assert summarize(pbt.step(PERIOD, objectives)) == [
            ("replace", 0, 2),
            ("replace", 1, 2),
        ]


def test_sources_are_uniform_over_the_best_group_and_never_the_copier() -> None:
    counts = {7: 0, 8: 0, 9: 0}
    for seed in range(300):
        pbt = make(10, seed=seed, mutation_probability=0.0)
        for e in pbt.step(PERIOD, {p: float(p) for p in range(10)}):
            assert e.kind == "replace" and e.policy in (0, 1, 2)
            assert e.source_policy != e.policy
            counts[e.source_policy] += 1
    assert all(250 < c < 350 for c in counts.values()), counts  # 900 copies, 300 expected each


def test_unranked_policies_are_left_alone() -> None:
    for seed in range(30):
        pbt = make(5, seed=seed, mutation_probability=1.0)
        # 0: no finished episodes, 3: NaN, 4: missing -> only 1 and 2 are ranked.
        events = pbt.step(PERIOD, {0: None, 1: 1.0, 2: 2.0, 3: math.nan})
        assert summarize(events)[0] == ("replace", 1, 2)
        assert {e.policy for e in events} == {1}
        for p in (0, 2, 3, 4):
            assert pbt.hyperparameters(p) == distinct_table(5)[p]
        assert events[0].objectives == {0: None, 1: 1.0, 2: 2.0, 3: None, 4: None}


def test_unknown_policy_in_objectives_is_an_error() -> None:
    with pytest.raises(ValueError):
        make(2).step(PERIOD, {0: 1.0, 2: 3.0})


# --- schedule ---------------------------------------------------------------------------------
def test_due_fires_once_per_boundary_even_after_a_jump() -> None:
    pbt = make(2)
    assert not pbt.due(0) and not pbt.due(PERIOD - 1) and pbt.due(PERIOD)
    assert pbt.step(PERIOD - 1, {0: 1.0, 1: 2.0}) == [] and pbt.rounds == 0  # not due: no-op
    pbt.step(PERIOD, {0: 1.0, 1: 2.0})
    assert pbt.rounds == 1 and not pbt.due(PERIOD) and not pbt.due(2 * PERIOD - 1)
    assert pbt.due(2 * PERIOD)
    # Env steps jump past the boundaries 2000..5000: one round, then the next at 6000.
    pbt.step(5 * PERIOD + 500, {0: 1.0, 1: 2.0})
    assert pbt.rounds == 2 and pbt.next_round_env_steps == 6 * PERIOD
    assert not pbt.due(5 * PERIOD + 999) and pbt.due(6 * PERIOD)
    assert pbt.step(5 * PERIOD + 999, {0: 1.0, 1: 2.0}) == [] and pbt.rounds == 2


# --- state ------------------------------------------------------------------------------------
def test_state_dict_round_trip_gives_identical_future_decisions() -> None:
    objectives = {p: float((3 * p) % 8) for p in range(8)}
    original = make(8, seed=7, mutation_probability=0.3)
    for r in range(1, 4):
        original.step(PERIOD * r, objectives)
    state = json.loads(json.dumps(original.state_dict()))  # must survive JSON

    # Same settings (they are configuration, not state), different seed: the state wins.
    resumed = make(8, seed=12345, mutation_probability=0.3)
    resumed.load_state_dict(state)
    assert resumed.rounds == 3 and resumed.next_round_env_steps == 4 * PERIOD
    for r in range(4, 12):
        assert resumed.step(PERIOD * r, objectives) == original.step(PERIOD * r, objectives)
    for p in range(8):
        assert resumed.hyperparameters(p) == original.hyperparameters(p)


def test_load_state_dict_rejects_a_different_population() -> None:
    state = make(4).state_dict()
    with pytest.raises(ValueError):
        make(8).load_state_dict(state)


def test_invalid_construction_is_rejected() -> None:
    with pytest.raises(ValueError):  # outside the default bounds
        make(2, table={0: {"adam_beta1": 1.0}, 1: {"adam_beta1": 0.9}})
    with pytest.raises(ValueError):  # different names per policy
        make(2, table={0: {"learning_rate": 1e-3}, 1: {"entropy_coeff": 0.01}})
    with pytest.raises(ValueError):  # a policy missing
        make(3, table=distinct_table(2))
    for bad in (
        {"period_env_steps": 0},
        {"period_env_steps": 1, "mutation_factor": 1.0},
        {"period_env_steps": 1, "replace_fraction": 0.6},
        {"period_env_steps": 1, "mutation_probability": 1.5},
        {"period_env_steps": 1, "bounds": {"adam_beta1": (0.0, 1.0)}},
    ):
        with pytest.raises(ValueError):
            PbtSettings(**bad)


# --- history file -----------------------------------------------------------------------------
def run_rounds(pbt: PopulationBasedTraining, first: int, last: int) -> list[list[PbtEvent]]:
    return [pbt.step(PERIOD * r, {p: float(p) for p in range(4)}) for r in range(first, last + 1)]


def test_history_round_trip_and_append_only(tmp_path) -> None:
    path = tmp_path / "experiment" / HISTORY_FILENAME
    pbt = make(4, mutation_probability=0.5)
    rounds = run_rounds(pbt, 1, 3)
    history = PbtHistory(path)
    history.append(rounds[0])
    first_bytes = path.read_bytes()
    history.append(rounds[1])
    PbtHistory(path).append(rounds[2])  # e.g. after a resume: a new object, same file
    assert path.read_bytes().startswith(first_bytes)
    expected = [e for events in rounds for e in events]
    assert len(expected) > 3
    assert PbtHistory.read(path) == expected
    assert len(path.read_text().splitlines()) == len(expected)


def test_history_survives_a_torn_last_line(tmp_path) -> None:
    path = tmp_path / HISTORY_FILENAME
    events = [
        e
        for round_events in run_rounds(make(4, mutation_probability=0.5), 1, 2)
        for e in round_events
    ]
    PbtHistory(path).append(events[:1])
    with open(path, "a") as file:
        file.write('{"kind": "mutate", "pol')  # a crash mid-write
    PbtHistory(path).append(events[1:])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert PbtHistory.read(path) == events
    assert len(caught) == 1


def test_reading_a_missing_history_gives_nothing(tmp_path) -> None:
    assert PbtHistory.read(tmp_path / HISTORY_FILENAME) == []
