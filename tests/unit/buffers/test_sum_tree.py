"""The sum tree against a plain array of priorities: totals, lookups, and the sampling
distribution."""

from __future__ import annotations

import numpy as np
import pytest

from sampleforge.buffers.sum_tree import SumTree


def _find_reference(priorities: np.ndarray, mass: float) -> int:
    """The smallest i with cumsum(priorities)[i] > mass."""
    return int(np.searchsorted(np.cumsum(priorities), mass, side="right"))


@pytest.mark.parametrize("capacity", [1, 5, 8, 1000])
def test_totals_and_lookups_match_a_plain_array(capacity):
    rng = np.random.default_rng(capacity)
    tree, plain = SumTree(capacity), np.zeros(capacity)
    for _ in range(20):
        indices = rng.integers(0, capacity, size=min(32, capacity))
        values = rng.random(indices.size) * 10
        values[rng.random(indices.size) < 0.2] = 0.0  # some zero priorities
        tree.update(indices, values)
        plain[indices] = values  # numpy also keeps the last of repeated indices
        assert tree.total == pytest.approx(plain.sum())
        np.testing.assert_array_equal(tree.priorities(np.arange(capacity)), plain)
        if plain.sum() == 0:
            continue
        masses = rng.random(64) * plain.sum()
        expected = [_find_reference(plain, m) for m in masses]
        np.testing.assert_array_equal(tree.find(masses), expected)


def test_zero_priorities_are_never_sampled_even_at_the_top_of_the_total():
    tree = SumTree(8)
    tree.update(np.array([2, 5]), np.array([1.0, 3.0]))
    found = tree.find(np.array([0.0, 0.999, 1.0, 3.9999999, np.nextafter(4.0, 0)]))
    np.testing.assert_array_equal(found, [2, 2, 5, 5, 5])
    assert set(tree.sample(256, np.random.default_rng(0))) <= {2, 5}


def test_sampling_frequencies_follow_the_priorities():
    rng = np.random.default_rng(0)
    priorities = np.array([1.0, 0.0, 2.0, 4.0, 8.0, 1.0])
    tree = SumTree(len(priorities))
    tree.update(np.arange(len(priorities)), priorities)
    draws = np.concatenate([tree.sample(64, rng) for _ in range(2000)])
    frequencies = np.bincount(draws, minlength=len(priorities)) / draws.size
    np.testing.assert_allclose(frequencies, priorities / priorities.sum(), atol=0.005)


def test_no_drift_after_many_updates():
    rng = np.random.default_rng(1)
    tree = SumTree(1024)
    for _ in range(2000):
        indices = rng.integers(0, 1024, 64)
        tree.update(indices, rng.random(64) * 1e6)
    tree.update(np.arange(1024), np.ones(1024))
    assert tree.total == 1024.0  # exact: every node recomputed from its children


def test_bad_input_is_refused():
    tree = SumTree(4)
    with pytest.raises(IndexError, match="indices must be in"):
        tree.update(np.array([4]), np.array([1.0]))
    with pytest.raises(ValueError, match="finite and >= 0"):
        tree.update(np.array([0]), np.array([np.nan]))
    with pytest.raises(ValueError, match="finite and >= 0"):
        tree.update(np.array([0]), np.array([-1.0]))
    with pytest.raises(ValueError, match="all 0"):
        tree.sample(2, np.random.default_rng(0))
