"""Population-based training: the decisions (:mod:`.population`), the event log
(:mod:`.history`), and the runner's side that carries them out (:mod:`.coordinator`).

The decisions need no torch and no processes: the coordinator calls
:class:`PopulationBasedTraining` and turns the returned :class:`PbtEvent` s into commands.
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
