"""MachineLoad (bench/machine_load.py): it sees another job taking a core."""

import subprocess
import sys
import time

import pytest

from sampleforge.bench.machine_load import MachineLoad, runnable_tasks

pytestmark = pytest.mark.exclusive  # it measures the machine's load


def _measure(seconds: float) -> float:
    with MachineLoad(interval=0.02) as load:
        time.sleep(seconds)
    assert load.median is not None
    return load.median


def test_a_spinning_process_raises_the_load_by_about_one():
    assert runnable_tasks() is not None
    quiet = _measure(0.6)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        busy = _measure(0.6)
    finally:
        spinner.kill()
        spinner.wait()
    assert busy >= quiet + 0.5, (quiet, busy)
