"""Periodic return of freed heap memory to the OS (glibc `malloc_trim`).

glibc keeps freed memory in its heaps for reuse and returns only what lies at the top of a
heap. A learner frees hundreds of MB of activations every SGD step; over hours the pieces it
keeps can add up, and the process's resident size grows although nothing is leaked (an Atari
learner alone held 274 MB live and 500-570 MB resident). `malloc_trim(0)` also releases the
free pages inside the heaps. Done once a minute, the cost (re-faulting the next step's
working set, well under 0.1 s) is far below 1%.

Must not: be called on the hot path of a component; `HeapTrimmer.maybe_trim` is cheap until due.
"""

from __future__ import annotations

import ctypes
import sys
import time

TRIM_EVERY_SEC = 60.0


def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None


class HeapTrimmer:
    """Calls glibc's `malloc_trim(0)` at most every `every_sec` seconds; a no-op elsewhere."""

    def __init__(self, every_sec: float = TRIM_EVERY_SEC):
        self.every_sec = every_sec
        self._trim = _malloc_trim()
        self._next = time.monotonic() + every_sec

    @property
    def available(self) -> bool:
        return self._trim is not None

    def maybe_trim(self) -> bool:
        """Trim if due; returns whether it did."""
        if self._trim is None or time.monotonic() < self._next:
            return False
        self._trim(0)
        self._next = time.monotonic() + self.every_sec
        return True
