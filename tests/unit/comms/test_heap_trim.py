"""HeapTrimmer gives freed heap memory back to the OS, and only when due."""

from __future__ import annotations

from pathlib import Path

import pytest

from sampleforge.comms.heap_trim import HeapTrimmer


def _anon_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def test_a_due_trim_returns_freed_heap_pages_to_the_os() -> None:
    trimmer = HeapTrimmer(every_sec=0.0)
    if not trimmer.available:
        pytest.skip("needs glibc")
    # 100 KB blocks stay below glibc's mmap threshold, so they come from the heap; a block
    # allocated after them keeps the heap's top in use, so free() alone returns nothing.
    blocks = [bytearray(100 << 10) for _ in range(2000)]
    keep_top = bytearray(100 << 10)
    del blocks
    before = _anon_mb()
    assert trimmer.maybe_trim()
    assert before - _anon_mb() > 100  # of the ~200 MB freed
    assert len(keep_top) == 100 << 10


def test_a_trim_that_is_not_due_does_nothing() -> None:
    assert not HeapTrimmer(every_sec=3600.0).maybe_trim()
