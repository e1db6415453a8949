"""The process shell every component runs in (comms/component_process.py)."""

from __future__ import annotations

import ctypes
import functools
import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from faster_fifo import Queue

from sampleforge.comms import component_process, heap
from sampleforge.comms.component_process import releasables_in
from sampleforge.comms.queues import make_queue, map_ring_pages, receive, send_many


def test_the_shell_finds_every_policy_weights_a_component_was_given(tmp_path):
    # Imported here: the probe's process below imports this module, and need not build runs.
    from sampleforge.components.runner import Runner
    from sampleforge.components.wiring import wire
    from sampleforge.config import make_config

    # Each process releases what it finds before it exits (on CUDA the weights are mapped
    # from the runner); one missed would keep its mapping alive past the process.
    cfg = make_config(
        env="CartPole-v1", train_dir=str(tmp_path), experiment="e", device="cpu", num_policies=2
    )
    runner = Runner(cfg)
    wiring = wire(runner.cfg, runner.env_spec, runner.env, runner.device, runner.exp, False)
    found = {spec.name: {id(w) for w in releasables_in(spec.kwargs)} for spec in wiring.specs}
    acting = {id(w) for w in wiring.weights.values()}
    for p in (0, 1):
        assert found[f"learner_p{p}"] == acting | {id(wiring.incoming_weights[p])}
        assert found[f"inference_worker_p{p}_0"] == {id(wiring.weights[p])}
    assert found["rollout_worker_0"] == found["rollout_worker_1"] == set()


# --- What the shell does in every component's own process, checked in one real process ----


def _shmem_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssShmem:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no RssShmem in /proc/self/status")


class _Probe:
    """A component that reports what the shell did in its process before and while it ran."""

    def __init__(self, ring: Queue, reports: Queue) -> None:
        self.name, self.running, self.reports = "probe", True, reports
        pdeathsig = ctypes.c_int(0)
        ctypes.CDLL(None).prctl(2, ctypes.byref(pdeathsig))  # PR_GET_PDEATHSIG
        # Built after the shell's start-up: if the shell mapped the ring, mapping it again here
        # adds nothing to this process's resident shared memory.
        before = _shmem_mb()
        map_ring_pages([ring])
        self.seen = {
            "ring_mb_mapped_by_build": _shmem_mb() - before,
            "leads_its_group": os.getpgid(0) == os.getpid(),
            "death_signal": pdeathsig.value,
            "sigint_ignored": signal.getsignal(signal.SIGINT) is signal.SIG_IGN,
        }
        self.give_up_at = time.monotonic() + 3.0

    def poll(self, timeout: float) -> None:
        time.sleep(0.01)
        if _TrimCounter.calls or time.monotonic() > self.give_up_at:
            send_many(self.reports, [{**self.seen, "malloc_trim_calls": _TrimCounter.calls}])
            self.running = False

    def close(self) -> None:
        pass


class _TrimCounter:
    """Stands in for the C library in the probe's process: counts `malloc_trim` calls."""

    calls = 0

    def __init__(self, libc) -> None:
        self._libc = libc
        self.mallopt = libc.mallopt

    def malloc_trim(self, pad: int) -> int:
        _TrimCounter.calls += 1
        return self._libc.malloc_trim(pad)


def _run_probe(ring: Queue, reports: Queue) -> None:
    """Entry point of the probe's process: the real shell, with trims counted and due at once."""
    libc = heap._glibc()
    heap._glibc = lambda: _TrimCounter(libc)  # type: ignore[assignment]
    component_process.HeapTrimmer = functools.partial(heap.HeapTrimmer, every_sec=0.0)  # type: ignore[misc]
    component_process.component_main("probe", _Probe, {"ring": ring, "reports": reports}, reports)


@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    """What one component process, run by the real shell, saw of itself (`_Probe.seen`)."""
    if heap._glibc() is None:
        pytest.skip("needs glibc and /proc")
    ring, reports = make_queue(8 << 20), make_queue()
    child = multiprocessing.get_context("spawn").Process(target=_run_probe, args=(ring, reports))
    child.start()
    try:
        deadline, found = time.monotonic() + 60, []
        while not found and time.monotonic() < deadline and child.exitcode is None:
            found = [m for m in receive(reports, 0.2) if isinstance(m, dict)]
        found += [m for m in receive(reports, 0.0) if isinstance(m, dict)]
        assert found, f"the probe reported nothing (exit code {child.exitcode})"
    finally:
        child.join(10)
        if child.exitcode is None:
            child.kill()
            child.join()
    return found[0]


def test_every_component_process_maps_its_queue_rings_at_start(probe) -> None:
    # comms/queues.py::map_ring_pages: otherwise its resident size creeps up for hours.
    assert probe["ring_mb_mapped_by_build"] < 0.5  # the 8 MB ring was mapped before the build


def test_every_component_process_trims_its_heap_while_it_runs(probe) -> None:
    # comms/heap.py: glibc otherwise keeps freed activations resident between SGD steps.
    assert probe["malloc_trim_calls"] >= 1


def test_every_component_process_leads_its_group_dies_with_the_runner_and_ignores_ctrl_c(
    probe,
) -> None:
    # docs/reliability.md, "Processes": what its envs start is killed with its group; the
    # kernel kills it if the runner dies; Ctrl-C is the runner's alone to act on.
    assert probe["leads_its_group"]
    assert probe["death_signal"] == signal.SIGKILL
    assert probe["sigint_ignored"]
