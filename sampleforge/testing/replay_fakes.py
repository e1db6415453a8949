"""Stand-ins for a replay learner's stager, for unit tests of the learners without a replay
or processes behind them: they record what the learner hands the replay's sampler.

Must not: be used outside tests.
"""

from __future__ import annotations

import numpy as np

from sampleforge.buffers.rate_limiter import SampleToInsertRatio
from sampleforge.learners.replay_stager import ReplayStager


class FakeSampler:
    """Records what the learner hands the replay's sampler."""

    def __init__(self) -> None:
        self.priority_updates: list[tuple[np.ndarray, np.ndarray]] = []
        self.betas: list[float] = []

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        self.priority_updates.append((np.array(indices), np.array(td_errors)))

    def set_beta(self, beta: float) -> None:
        self.betas.append(beta)


class FakeReplay:
    num_sampleable = 0

    def nbytes(self) -> int:
        return 0


class FakeStager:
    """What the learner reads of a ReplayStager, without a replay behind it."""

    batches_per_take = 4

    def __init__(self) -> None:
        self.sampler = FakeSampler()
        self.limiter = SampleToInsertRatio(1.0, min_size_to_sample=1, error_buffer=1.0)
        self.replay = FakeReplay()
        self.inserted_steps = 0
        self.current_version = 0

    def take_lags(self) -> np.ndarray:
        return np.zeros(1)

    # The real report, over the stand-ins above.
    report = ReplayStager.report
