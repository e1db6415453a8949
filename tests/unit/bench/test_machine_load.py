"""MachineLoad (bench/machine_load.py): it sees another job taking a core."""

import signal
import statistics
import subprocess
import sys
import time

import pytest

from sampleforge.bench.machine_load import MachineLoad, runnable_tasks

pytestmark = pytest.mark.exclusive  # it measures the machine's load


def _samples(seconds: float) -> list[int]:
    with MachineLoad(interval=0.02) as load:
        time.sleep(seconds)
    assert load.samples
    return load.samples


def test_a_spinning_process_raises_the_load_by_about_one():
    """Windows with the spinner running and stopped alternate, so that whatever else the
    machine runs meanwhile weighs on both alike (the suite may share a busy machine)."""
    assert runnable_tasks() is not None
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    quiet: list[int] = []
    busy: list[int] = []
    try:
        for _ in range(4):
            spinner.send_signal(signal.SIGSTOP)
            time.sleep(0.05)
            quiet += _samples(0.3)
            spinner.send_signal(signal.SIGCONT)
            time.sleep(0.05)
            busy += _samples(0.3)
    finally:
        spinner.kill()
        spinner.wait()
    assert statistics.median(busy) >= statistics.median(quiet) + 0.5, (quiet, busy)
