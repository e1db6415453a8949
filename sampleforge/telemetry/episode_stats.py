"""Rolling statistics over the most recent finished episodes.

Responsibility: keep the last ``maxlen`` episode returns and lengths and give
their means plus the best mean seen so far (for ``stop_at_mean_return`` and
best-checkpoint decisions).

What this module must not do: know about environments, policies or logging;
it only aggregates numbers it is given.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["EpisodeStatsWindow"]


class EpisodeStatsWindow:
    """Window of the last ``maxlen`` episodes (default 100, as in Sample Factory).

    ``best_mean_return`` is the highest ``mean_return`` observed after any
    :meth:`add` that left at least one episode in the window. It uses whatever
    is in the window, so early values average fewer than ``maxlen`` episodes
    and can be noisy; callers that need a full window can check ``count``.
    """

    def __init__(self, maxlen: int = 100) -> None:
        """Create an empty window holding at most ``maxlen`` episodes."""
        if maxlen < 1:
            raise ValueError(f"maxlen must be >= 1, got {maxlen}")
        self.maxlen = maxlen
        self._returns: deque[float] = deque(maxlen=maxlen)
        self._lengths: deque[float] = deque(maxlen=maxlen)
        self._best_mean_return: float | None = None
        self._total_episodes = 0

    def add(self, returns: Sequence[float], lengths: Sequence[int]) -> None:
        """Append finished episodes; ``returns[i]`` and ``lengths[i]`` are one episode."""
        if len(returns) != len(lengths):
            raise ValueError(f"{len(returns)} returns but {len(lengths)} lengths")
        if not returns:
            return
        self._returns.extend(float(r) for r in returns)
        self._lengths.extend(float(n) for n in lengths)
        self._total_episodes += len(returns)
        mean = self.mean_return
        if mean is None:  # unreachable: the window just received at least one episode
            raise AssertionError("episode window empty right after add")
        if math.isnan(mean):
            return  # a NaN best would compare False forever and freeze the record
        if self._best_mean_return is None or mean > self._best_mean_return:
            self._best_mean_return = mean

    @property
    def mean_return(self) -> float | None:
        """Mean return over the window, or None before the first episode."""
        return _mean(self._returns)

    @property
    def mean_length(self) -> float | None:
        """Mean episode length over the window, or None before the first episode."""
        return _mean(self._lengths)

    @property
    def count(self) -> int:
        """Episodes currently in the window (at most ``maxlen``)."""
        return len(self._returns)

    @property
    def total_episodes(self) -> int:
        """Episodes ever added, including those that left the window."""
        return self._total_episodes

    @property
    def best_mean_return(self) -> float | None:
        """Highest window mean seen after any add, or None before the first episode."""
        return self._best_mean_return

    def state_dict(self) -> dict[str, Any]:
        """The window as plain JSON values (`load_state_dict` takes it back)."""
        return {
            "maxlen": self.maxlen,
            "returns": list(self._returns),
            "lengths": list(self._lengths),
            "best_mean_return": self._best_mean_return,
            "total_episodes": self._total_episodes,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state_dict()`'s output; a window of another size keeps the newest
        episodes that fit. Raises ValueError on a malformed state (and then changes nothing)."""
        returns = [float(r) for r in state["returns"]]
        lengths = [float(n) for n in state["lengths"]]
        best = state["best_mean_return"]
        total = int(state["total_episodes"])
        if len(returns) != len(lengths) or total < len(returns):
            raise ValueError(
                f"{len(returns)} returns, {len(lengths)} lengths, {total} episodes in all"
            )
        self._returns = deque(returns, maxlen=self.maxlen)
        self._lengths = deque(lengths, maxlen=self.maxlen)
        self._best_mean_return = None if best is None else float(best)
        self._total_episodes = total


def _mean(values: deque[float]) -> float | None:
    # Recomputed each call: windows are small and this avoids float drift of running sums.
    return sum(values) / len(values) if values else None
