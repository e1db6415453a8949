"""Unit tests for PolicyMapping (envs/policy_mapping.py)."""

from __future__ import annotations

import numpy as np
import pytest

from sampleforge.envs.policy_mapping import PolicyMapping, PolicyMappingError


def last_seat_frozen(env_index, seat, num_policies, num_frozen, rng):
    return num_policies if seat == 1 else env_index % num_policies


def out_of_range(env_index, seat, num_policies, num_frozen, rng):
    return 99


def test_random_draws_every_trained_policy_and_never_a_frozen_one_without_snapshots():
    mapping = PolicyMapping("random", num_policies=4)
    rng = np.random.default_rng(0)
    ids = np.concatenate([mapping.assign(i, 2, rng) for i in range(500)])
    assert set(ids.tolist()) == {0, 1, 2, 3}
    assert np.bincount(ids).min() > 180  # about uniform: 250 each


def test_random_puts_frozen_opponents_only_on_opponent_seats_at_the_given_rate():
    mapping = PolicyMapping("random", num_policies=2, num_frozen=3, frozen_opponent_prob=0.25)
    rng = np.random.default_rng(1)
    seats = np.stack([mapping.assign(i, 2, rng) for i in range(4000)])
    assert (seats[:, 0] < 2).all()  # seat 0 always produces training data
    frozen = seats[:, 1] >= 2
    assert 0.22 < frozen.mean() < 0.28
    assert set(seats[frozen, 1].tolist()) == {2, 3, 4}


def test_seat_mapping_is_fixed():
    mapping = PolicyMapping("seat", num_policies=2)
    assert mapping.assign(5, 3, np.random.default_rng()).tolist() == [0, 1, 0]


def test_custom_function_by_import_path():
    mapping = PolicyMapping(f"{__name__}:last_seat_frozen", num_policies=3, num_frozen=1)
    assert mapping.assign(4, 2, np.random.default_rng()).tolist() == [1, 3]


@pytest.mark.parametrize(
    "name, match",
    [
        ("nonsense", "neither one of random, seat"),
        ("no_such_module_xyz:fn", "cannot be imported"),
        (f"{__name__}:missing_function", "cannot be imported"),
    ],
)
def test_bad_mapping_names_are_clear_errors(name, match):
    with pytest.raises(PolicyMappingError, match=match):
        PolicyMapping(name, num_policies=2)


def test_a_custom_function_returning_a_bad_id_is_named():
    mapping = PolicyMapping(f"{__name__}:out_of_range", num_policies=2)
    with pytest.raises(PolicyMappingError, match="returned policy 99; allowed: 0..1"):
        mapping.assign(0, 2, np.random.default_rng())
