"""The samples-per-insert rate limiter of a replay (after Reverb's ``SampleToInsertRatio``).

Responsible for: holding the ratio of items sampled from a replay to items inserted into it
near a target, whatever the relative speeds of the inserting and the sampling sides, by saying
how much each side may do now; and reporting the ratio reached.

Must not: block, sleep or signal (its owner turns "not now" into waiting or back-pressure), or
know what the items are.

With ``samples_per_insert`` = r, the balance is ``d = r * inserts - samples``: every insert
earns r samples, every sample spends one. Sampling is allowed while ``d`` stays at least
``min_diff`` (and only after ``min_size_to_sample`` inserts), inserting while ``d`` stays at
most ``max_diff``, with ``min_diff = r * min_size_to_sample - error_buffer`` and
``max_diff = r * min_size_to_sample + error_buffer``. So whichever side runs ahead by more than
``error_buffer`` samples' worth waits for the other; a wide buffer lets both run freely for a
while, a narrow one keeps the ratio tight at every moment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class SampleToInsertRatio:
    """Counts inserts and samples and says how many more of each the target ratio allows."""

    samples_per_insert: float
    min_size_to_sample: int
    error_buffer: float
    inserts: int = 0
    samples: int = 0

    def __post_init__(self) -> None:
        if not (self.samples_per_insert > 0 and math.isfinite(self.samples_per_insert)):
            raise ValueError(f"samples_per_insert must be > 0, got {self.samples_per_insert}")
        if self.min_size_to_sample < 1:
            raise ValueError(f"min_size_to_sample must be >= 1, got {self.min_size_to_sample}")
        # Below one insert's worth of samples either side could be blocked with the other side
        # unable to move the balance far enough to free it.
        if self.error_buffer < max(1.0, self.samples_per_insert):
            raise ValueError(
                f"error_buffer must be >= max(1, samples_per_insert) = "
                f"{max(1.0, self.samples_per_insert)}, got {self.error_buffer}"
            )

    @property
    def _balance(self) -> float:
        return self.samples_per_insert * self.inserts - self.samples

    @property
    def _min_diff(self) -> float:
        return self.samples_per_insert * self.min_size_to_sample - self.error_buffer

    @property
    def _max_diff(self) -> float:
        return self.samples_per_insert * self.min_size_to_sample + self.error_buffer

    def samples_allowed(self) -> int:
        """How many items may be sampled now without breaking the ratio (0 means wait for
        inserts)."""
        if self.inserts < self.min_size_to_sample:
            return 0
        return max(0, math.floor(self._balance - self._min_diff))

    def inserts_allowed(self) -> int:
        """How many items may be inserted now without breaking the ratio (0 means wait for
        samples). Until sampling may start, inserting is never held back."""
        if self.inserts < self.min_size_to_sample:
            return self.min_size_to_sample - self.inserts + self._inserts_within(self.error_buffer)
        return max(0, self._inserts_within(self._max_diff - self._balance))

    def _inserts_within(self, room: float) -> int:
        return math.floor(room / self.samples_per_insert)

    def inserted(self, count: int) -> None:
        self.inserts += count

    def sampled(self, count: int) -> None:
        self.samples += count

    @property
    def observed_samples_per_insert(self) -> float:
        """Samples per insert since sampling became allowed (nan before)."""
        counted = self.inserts - self.min_size_to_sample
        return self.samples / counted if counted > 0 else math.nan

    def state_dict(self) -> dict[str, float]:
        return {
            "inserts": self.inserts,
            "samples": self.samples,
            "samples_per_insert": self.samples_per_insert,
            "min_size_to_sample": self.min_size_to_sample,
        }

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Go on from saved counts. Saved under another ratio or start size (a resume with
        new settings), the counts are rebased: the saved balance's distance from its centre
        carries over, within this limiter's error buffer, rather than the balance itself,
        which would be off by the change times every insert so far and stall one side for
        as long as the run has been going."""
        self.inserts, self.samples = int(state["inserts"]), int(state["samples"])
        ratio = float(state.get("samples_per_insert", self.samples_per_insert))
        start = int(state.get("min_size_to_sample", self.min_size_to_sample))
        if (ratio, start) == (self.samples_per_insert, self.min_size_to_sample):
            return
        ahead = ratio * self.inserts - self.samples - ratio * start  # unspent samples
        ahead = min(max(ahead, -self.error_buffer), self.error_buffer)
        centre = self.samples_per_insert * self.min_size_to_sample
        self.samples = max(0, round(self.samples_per_insert * self.inserts - centre - ahead))
