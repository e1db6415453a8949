"""Exact comparison of nested training state (dicts, lists, tensors, arrays, numbers), for
tests that assert two ways of training made the same updates bit for bit.

Must not: be used outside tests.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch


def exactly_equal(a: Any, b: Any) -> bool:
    """Whether `a` and `b` are equal to the bit: the same keys, lengths, tensor shapes and
    values; a float nan equals nan (a statistic not measured yet is nan in both)."""
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and a.keys() == b.keys()
            and all(exactly_equal(a[k], b[k]) for k in a)
        )
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(exactly_equal(x, y) for x, y in zip(a, b))
    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)
