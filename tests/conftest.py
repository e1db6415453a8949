"""How tests share the machine when the suite runs in parallel (pytest-xdist, `-n 2`: the
README's test command).

Most tests spend much of their time waiting on other processes, so two at a time finish the
suite sooner. Tests marked `exclusive` (wall-clock bounds, load and throughput measurements,
checks on what the whole machine holds) run with the machine to themselves: every test holds
a shared lock on one file for its whole run (setup, including session fixtures it triggers,
call and teardown), an exclusive test an exclusive one. A waiting exclusive test first takes a
gate that new tests pass through, so it waits only for the tests already running.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def _locked(path: Path, operation: int) -> Iterator[None]:
    with open(path, "a") as file:
        fcntl.flock(file, operation)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


@contextmanager
def _share_of_the_machine(item: pytest.Item) -> Iterator[None]:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield  # one test at a time anyway
        return
    # The parent of each worker's base temp folder is the same for all workers of one run.
    shared = item.config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
    gate, room = shared / "machine.gate", shared / "machine.room"
    if item.get_closest_marker("exclusive"):
        with _locked(gate, fcntl.LOCK_EX), _locked(room, fcntl.LOCK_EX):
            yield
    else:
        with _locked(gate, fcntl.LOCK_EX):
            pass
        with _locked(room, fcntl.LOCK_SH):
            yield


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outside pytest-timeout's timer
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    with _share_of_the_machine(item):
        yield


@pytest.fixture
def short_tmpdir() -> Iterator[Path]:
    """A private TMPDIR for a command under test, short enough for the Unix socket paths that
    multiprocessing makes in it (108 bytes: `tmp_path`, under xdist, can leave too little)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="sf-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
