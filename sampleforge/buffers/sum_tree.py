"""A sum tree over replay priorities: proportional sampling and priority updates in O(log N),
vectorised over a batch (prioritized experience replay, Schaul et al. 2016, Appendix B.2.1).

Responsible for: storing one non-negative priority per replay index, sampling indices with
probability proportional to priority, and reading the total and each index's priority.

Must not: know what the indices hold, compute priorities from errors (the learner does, with
its exponents), or lock: one thread owns a tree.

Layout: a complete binary tree in one float64 array, 1-indexed; node i has children 2i and
2i + 1, and the leaves are nodes [capacity_pow2, 2 capacity_pow2). Every internal node is
recomputed from its two children rather than adjusted by a difference, so no rounding drift
builds up however many updates run.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """Priorities of ``capacity`` indices, all 0 at first."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._leaves = 1 << max(0, (capacity - 1).bit_length())
        self._depth = self._leaves.bit_length() - 1
        self._tree = np.zeros(2 * self._leaves, dtype=np.float64)

    @property
    def total(self) -> float:
        """The sum of all priorities."""
        return float(self._tree[1])

    def priorities(self, indices: np.ndarray) -> np.ndarray:
        """The priorities of ``indices`` ([K] int) -> [K] float64."""
        return self._tree[self._leaves + np.asarray(indices)]

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set the priorities of ``indices`` ([K] int, in [0, capacity); a repeated index takes
        its last value) to ``priorities`` ([K], finite and >= 0)."""
        indices = np.asarray(indices, dtype=np.int64)
        priorities = np.asarray(priorities, dtype=np.float64)
        if indices.size and (indices.min() < 0 or indices.max() >= self.capacity):
            raise IndexError(f"indices must be in [0, {self.capacity}), got {indices}")
        if not np.all(np.isfinite(priorities) & (priorities >= 0)):
            raise ValueError(f"priorities must be finite and >= 0, got {priorities}")
        nodes = self._leaves + indices
        self._tree[nodes] = priorities
        tree = self._tree
        for _ in range(self._depth):
            nodes >>= 1
            tree[nodes] = tree[2 * nodes] + tree[2 * nodes + 1]

    def find(self, masses: np.ndarray) -> np.ndarray:
        """The index whose cumulative priority interval holds each mass: the smallest i with
        sum(priorities[:i + 1]) > mass. masses: [K] in [0, total) -> [K] int64 indices, each
        of non-zero priority."""
        masses = np.array(masses, dtype=np.float64)
        nodes = np.ones(masses.shape, dtype=np.int64)
        tree = self._tree
        for _ in range(self._depth):
            left = 2 * nodes
            left_sum = tree[left]
            # Go right when the mass lies past the left subtree, or when the left subtree is
            # empty (a mass at the very top of the total must not land on a zero priority).
            go_right = (masses >= left_sum) & (tree[left + 1] > 0)
            masses -= np.where(go_right, left_sum, 0.0)
            nodes = left + go_right
        return nodes - self._leaves

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """``batch_size`` indices drawn with probability proportional to priority, stratified:
        one uniform draw in each of ``batch_size`` equal segments of the total (as Schaul et
        al. do), which lowers the variance of a batch's composition. -> [batch_size] int64."""
        total = self.total
        if not total > 0:
            raise ValueError("cannot sample from a sum tree whose priorities are all 0")
        segment = total / batch_size
        masses = (np.arange(batch_size) + rng.random(batch_size)) * segment
        return self.find(np.minimum(masses, np.nextafter(total, 0)))
