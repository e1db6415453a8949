"""Rolling statistics over the most recent finished episodes.

Responsibility: keep the last ``maxlen`` episode returns and lengths and give
their means plus the best mean seen so far (for ``stop_at_mean_return`` and
best-checkpoint decisions); for a run of several trained policies, pool their
own windows so that each policy weighs the same (`PopulationEpisodeWindows`).

What this module must not do: know about environments, policies or logging;
it only aggregates numbers it is given.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["EpisodeStatsWindow", "PopulationEpisodeWindows"]


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
        if self.mean_return is None:  # unreachable: the window just received an episode
            raise AssertionError("episode window empty right after add")
        self._best_mean_return = _highest(self._best_mean_return, self.mean_return)

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


class PopulationEpisodeWindows:
    """The run-wide window of a run with several trained policies: each policy's last
    ``maxlen`` episodes, and means over the policies' own means, so every policy weighs the same.

    One window of the last 100 episodes of all policies would hold whichever policy reported
    last (a rollout worker reports each policy's episodes in a batch of their own) and would
    weigh a policy by how fast it finishes episodes. ``mean_return`` is None until every policy
    has finished an episode; ``count`` is the fewest episodes any policy has in its window, so
    a full window (``count == maxlen``) is full for every policy. ``best_mean_return`` is the
    highest ``mean_return`` after any add. With one policy this is that policy's window.
    """

    def __init__(self, num_policies: int, maxlen: int = 100) -> None:
        """Create empty windows of at most ``maxlen`` episodes for policies 0..num_policies-1."""
        if num_policies < 1:
            raise ValueError(f"num_policies must be >= 1, got {num_policies}")
        self.maxlen = maxlen
        self.windows = {p: EpisodeStatsWindow(maxlen) for p in range(num_policies)}
        self._best_mean_return: float | None = None

    def add(self, policy_id: int, returns: Sequence[float], lengths: Sequence[int]) -> None:
        """Append finished episodes of policy `policy_id`."""
        self.windows[policy_id].add(returns, lengths)
        self._best_mean_return = _highest(self._best_mean_return, self.mean_return)

    @property
    def mean_return(self) -> float | None:
        """The mean of the policies' mean returns, or None before every policy has one."""
        return _mean_of_all([w.mean_return for w in self.windows.values()])

    @property
    def mean_length(self) -> float | None:
        """The mean of the policies' mean episode lengths, or None as ``mean_return``."""
        return _mean_of_all([w.mean_length for w in self.windows.values()])

    @property
    def count(self) -> int:
        """The fewest episodes any policy has in its window."""
        return min(w.count for w in self.windows.values())

    @property
    def total_episodes(self) -> int:
        """Episodes ever added, of every policy."""
        return sum(w.total_episodes for w in self.windows.values())

    @property
    def best_mean_return(self) -> float | None:
        """Highest ``mean_return`` seen after any add, or None before there was one."""
        return self._best_mean_return

    def state_dict(self) -> dict[str, Any]:
        """The windows as plain JSON values (`load_state_dict` takes them back)."""
        return {
            "policies": {str(p): w.state_dict() for p, w in self.windows.items()},
            "best_mean_return": self._best_mean_return,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state_dict()`'s output. Raises ValueError or KeyError on a malformed
        state, or one of another number of policies (and then changes nothing)."""
        saved = state["policies"]
        if set(saved) != {str(p) for p in self.windows}:
            raise ValueError(
                f"windows of policies {sorted(saved)}; this run trains {len(self.windows)}"
            )
        best = None if state["best_mean_return"] is None else float(state["best_mean_return"])
        for p in self.windows:  # every one parses before any is replaced
            EpisodeStatsWindow(self.maxlen).load_state_dict(saved[str(p)])
        for p, window in self.windows.items():
            window.load_state_dict(saved[str(p)])
        self._best_mean_return = best


def _highest(best: float | None, mean: float | None) -> float | None:
    """The best mean after a window's mean became `mean` (None: no mean yet). A NaN mean is
    left out: a NaN best would compare False forever and freeze the record."""
    if mean is None or math.isnan(mean):
        return best
    return mean if best is None or mean > best else best


def _mean_of_all(means: list[float | None]) -> float | None:
    """The mean of `means`, or None while any of them is None."""
    if any(m is None for m in means):
        return None
    return sum(means) / len(means)  # type: ignore[arg-type]  # no None left


def _mean(values: deque[float]) -> float | None:
    # Recomputed each call: windows are small and this avoids float drift of running sums.
    return sum(values) / len(values) if values else None
