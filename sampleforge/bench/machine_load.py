"""How busy the machine was while a benchmark measured something in isolation.

A ratio such as training / compute limit compares measurements taken at different moments; on
a shared machine another job running during one of them skews it. `MachineLoad` samples the
number of runnable tasks (`/proc/loadavg`'s fourth field, which reacts at once, unlike the
load averages) in a background thread and reports their median, without the sampling thread.

Must not: start, stop or slow down what it watches.
"""

from __future__ import annotations

import statistics
import threading
from pathlib import Path

LOADAVG = Path("/proc/loadavg")


def runnable_tasks() -> int | None:
    """Tasks running or ready to run now, this reader excluded; None where unknown."""
    try:
        running = LOADAVG.read_text().split()[3]  # "running/total"
    except (OSError, IndexError):
        return None
    return max(int(running.split("/")[0]) - 1, 0)


class MachineLoad:
    """`with MachineLoad() as load: ...`; then `load.median` (None where unknown)."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="load-sampler", daemon=True)

    def __enter__(self) -> MachineLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            tasks = runnable_tasks()
            if tasks is not None:
                self.samples.append(tasks)

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None
