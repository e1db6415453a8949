"""How tests share the machine when the suite runs in parallel (pytest-xdist, `-n 2`: the
README's test command).

Most tests spend much of their time waiting on other processes, so two at a time finish the
suite sooner. Tests marked `exclusive` (wall-clock bounds, load and throughput measurements,
checks on what the whole machine holds) run with the machine to themselves: every test holds
a shared lock on one file for its whole run (setup, including session fixtures it triggers,
call and teardown), an exclusive test an exclusive one. A waiting exclusive test first takes a
gate that new tests pass through, so it waits only for the tests already running.

The exclusive tests are collected first, as one block, and a worker keeps its exclusive lock
from one exclusive test to the next: otherwise the other worker slips a test in between each
two, and every exclusive test waits for that one (a minute, if it is a learning test).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
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


def _exclusive(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("exclusive") is not None


class _ExclusiveHold:
    """This worker's exclusive locks (gate and room), kept while its exclusive tests follow
    one another."""

    def __init__(self) -> None:
        self._locks: ExitStack | None = None

    def take(self, gate: Path, room: Path) -> None:
        if self._locks is None:
            locks = ExitStack()
            locks.enter_context(_locked(gate, fcntl.LOCK_EX))
            locks.enter_context(_locked(room, fcntl.LOCK_EX))
            self._locks = locks

    def release(self) -> None:
        if self._locks is not None:
            self._locks.close()
            self._locks = None


_EXCLUSIVE_HOLD = _ExclusiveHold()


@contextmanager
def _share_of_the_machine(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield  # one test at a time anyway
        return
    # The parent of each worker's base temp folder is the same for all workers of one run.
    shared = item.config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
    gate, room = shared / "machine.gate", shared / "machine.room"
    if not _exclusive(item):
        _EXCLUSIVE_HOLD.release()  # (a planned exclusive successor went to the other worker)
        with _locked(gate, fcntl.LOCK_EX):
            pass
        with _locked(room, fcntl.LOCK_SH):
            yield
        return
    _EXCLUSIVE_HOLD.take(gate, room)
    try:
        yield
    finally:
        if not _exclusive(nextitem):
            _EXCLUSIVE_HOLD.release()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outside pytest-timeout's timer
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    with _share_of_the_machine(item, nextitem):
        yield


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The exclusive tests first, in one block (see the module docstring)."""
    items[:] = [i for i in items if _exclusive(i)] + [i for i in items if not _exclusive(i)]


def pytest_sessionfinish() -> None:
    _EXCLUSIVE_HOLD.release()


@pytest.fixture
def short_tmpdir() -> Iterator[Path]:
    """A private TMPDIR for a command under test, short enough for the Unix socket paths that
    multiprocessing makes in it (108 bytes: `tmp_path`, under xdist, can leave too little)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="sf-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
