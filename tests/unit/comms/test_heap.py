"""The component heap policy: freed tensor memory is reused (not faulted in again at every
step), and HeapTrimmer gives freed heap memory back to the OS, only when due."""

from __future__ import annotations

import multiprocessing
import resource
from pathlib import Path

import pytest

from sampleforge.comms.heap import HeapTrimmer, reuse_freed_tensor_memory


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


def _page_faults_per_step(reuse: bool) -> float:
    """Minor page faults per step of a loop that, like an inference step, allocates three 4 MB
    tensors and frees them together."""
    import torch

    from sampleforge.comms import heap

    # glibc's default adapts its thresholds to what was freed before, so its cost depends on
    # the process's history (200 to 3,000 faults a step were seen). Pin the cost of glibc's
    # starting settings instead: every 4 MB tensor is a fresh mmap, faulted in page by page.
    assert heap._glibc().mallopt(heap._M_MMAP_THRESHOLD, 128 << 10)
    if reuse:
        assert reuse_freed_tensor_memory()

    def step() -> float:
        a, b, c = torch.ones(1 << 20), torch.ones(1 << 20), torch.ones(1 << 20)
        return float(a[-1] + b[-1] + c[-1])

    step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(100):
        step()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 100


def test_reused_tensor_memory_is_not_faulted_in_again_at_every_step() -> None:
    if HeapTrimmer().available is False:
        pytest.skip("needs glibc")
    # Fresh processes: the heap settings are process-wide and must not leak into this one.
    with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
        default = pool.apply(_page_faults_per_step, (False,))
    with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
        reused = pool.apply(_page_faults_per_step, (True,))
    pages_touched = 3 * (4 << 20) // 4096
    assert default > pages_touched * 0.9  # every step faults its 12 MB in again
    assert reused < pages_touched / 10  # reused: a few pages of torch's own bookkeeping
