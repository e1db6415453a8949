"""How a component process's glibc heap treats tensor memory: reuse it, and give it back once
a minute.

Reuse (`reuse_freed_tensor_memory`). By default glibc serves a block of more than 128 KB
with its own `mmap`, and after a free it raises that threshold only to the size just freed
and trims the heap's top once more than twice that is free. An inference step frees a few MB
of activations together (atari_breakout, batch 32: a 3.6 MB float copy of the frames and the
conv outputs), so every step gave its pages back to the OS and faulted them in again: about
100,000 page faults per second, and a cost that changed from one process to the next with
where the blocks landed (the ReLU model alone on a core: 238-317 us per sample in ten
processes, 206-213 in each of three once blocks are reused). Fixed thresholds keep blocks of
up to 32 MB (glibc's largest mmap threshold) in the heap for the next step. Larger blocks,
such as a learner's whole minibatch, still get their own mappings.

Trim (`HeapTrimmer`). glibc keeps freed memory in its heaps for reuse and returns only what
lies at the top of a heap. A learner frees hundreds of MB of activations every SGD step; over
hours the pieces it keeps can add up, and the process's resident size grows although nothing
is leaked (an Atari learner alone held 274 MB live and 500-570 MB resident). `malloc_trim(0)`
also releases the free pages inside the heaps. Done once a minute, the cost (re-faulting the
next step's working set, well under 0.1 s) is far below 1%, and it bounds what reuse keeps.

Must not: be called on the hot path of a component; `HeapTrimmer.maybe_trim` is cheap until
due. Both are no-ops where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import sys
import time

TRIM_EVERY_SEC = 60.0

# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest on 64-bit
TRIM_THRESHOLD_BYTES = 256 << 20  # free memory the heap's top may keep between trims


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim, libc.mallopt  # noqa: B018 - musl has neither
    except (OSError, AttributeError):
        return None
    return libc


def reuse_freed_tensor_memory() -> bool:
    """Keep freed blocks of up to 32 MB in this process's heap for reuse instead of returning
    them to the OS at every free; returns whether the C library took the settings."""
    libc = _glibc()
    if libc is None:
        return False
    # Setting either threshold also stops glibc's own adjustment of both.
    return bool(
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )


class HeapTrimmer:
    """Calls glibc's `malloc_trim(0)` at most every `every_sec` seconds; a no-op elsewhere."""

    def __init__(self, every_sec: float = TRIM_EVERY_SEC):
        self.every_sec = every_sec
        libc = _glibc()
        self._trim = libc.malloc_trim if libc is not None else None
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
