"""Population-based training: decisions (:mod:`.population`) and the event log (:mod:`.history`).

No torch, no processes: the runner calls :class:`PopulationBasedTraining` and carries out the
returned :class:`PbtEvent` s itself.
"""

from sampleforge.pbt.history import HISTORY_FILENAME, PbtHistory
from sampleforge.pbt.population import (
    DEFAULT_BOUNDS,
    GroupSizes,
    PbtEvent,
    PbtSettings,
    PopulationBasedTraining,
    group_sizes,
    mutate_value,
)

__all__ = [
    "DEFAULT_BOUNDS",
    "HISTORY_FILENAME",
    "GroupSizes",
    "PbtEvent",
    "PbtHistory",
    "PbtSettings",
    "PopulationBasedTraining",
    "group_sizes",
    "mutate_value",
]
