"""The core assignment of `worker_cpu_affinity`: round-robin over the usable cores, wrapping
around when workers outnumber cores; and pinning itself. That each generation of a worker gets
the same core is the wiring's part (tests/component/test_wiring_cpu_affinity.py)."""

from __future__ import annotations

import os
import sys

import pytest

from sampleforge.comms.cpu_affinity import (
    affinity_supported,
    pin_to_core,
    rollout_worker_core,
    usable_cores,
)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sched_setaffinity")


def test_workers_take_the_cores_in_turn():
    assert [rollout_worker_core(w, (0, 1, 2, 3)) for w in range(4)] == [0, 1, 2, 3]


def test_cores_are_taken_in_ascending_order_whatever_the_set_holds():
    # A cpuset (taskset, a container) need not start at 0 nor be contiguous.
    assert [rollout_worker_core(w, {9, 2, 5}) for w in range(3)] == [2, 5, 9]


def test_more_workers_than_cores_wrap_around():
    assert [rollout_worker_core(w, (4, 6)) for w in range(5)] == [4, 6, 4, 6, 4]


def test_first_shifts_the_assignment_and_wraps():
    """The second rank of a data-parallel run on one node starts where the first one ended."""
    cores = range(4)
    assert [rollout_worker_core(w, cores, first=2) for w in range(2)] == [2, 3]
    assert [rollout_worker_core(w, cores, first=3) for w in range(3)] == [3, 0, 1]


@pytest.mark.parametrize(
    "worker, cores, message",
    [(-1, (0, 1), "worker index must be >= 0, got -1"), (0, (), "no cores")],
)
def test_bad_input_is_refused_in_one_line(worker, cores, message):
    with pytest.raises(ValueError, match=message):
        rollout_worker_core(worker, cores)


@linux_only
def test_pin_to_core_pins_this_process_and_its_children():
    before = os.sched_getaffinity(0)
    core = max(before)
    try:
        pin_to_core(core)
        assert os.sched_getaffinity(0) == {core}
        child = os.fork()
        if child == 0:  # the child reports its affinity through its exit code
            os._exit(0 if os.sched_getaffinity(0) == {core} else 1)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "a child did not inherit the core"
    finally:
        os.sched_setaffinity(0, before)


@linux_only
def test_usable_cores_are_this_process_affinity_in_order():
    assert usable_cores() == tuple(sorted(os.sched_getaffinity(0)))
    assert affinity_supported()


def test_a_platform_without_sched_setaffinity_is_unsupported(monkeypatch):
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    assert not affinity_supported()
