"""Ctrl-C and SIGTERM: who acts on them, and how processes we start are kept from dying of them.

A run's first SIGINT or SIGTERM asks the process that owns it (the runner, or a command's main
process) for a clean stop; a second Ctrl-C kills every child process and exits at once
(`Interrupts`, `exit_at_once`). Every other process must leave that decision to its owner,
because a scheduler, `systemctl stop` or `pkill -s` sends SIGTERM to all of them together: a
learner that died of it could not write the final checkpoint. Such a child starts with both
signals blocked (`signals_deferred`, inherited through fork and exec, as multiprocessing's
resource tracker starts), chooses how to handle them, then unblocks them
(`leave_signals_to_the_parent`): none can arrive in between and kill it.

Must not: import anything heavy (processes import this while they start).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from multiprocessing import forkserver, util

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_CODES: dict[int, int] = {signal.SIGINT: 130, signal.SIGTERM: 143}

# Folders a hard exit removes too (`remove_at_hard_exit`): normal exits clean them themselves.
_removed_at_hard_exit: list[str] = []


class Interrupted(KeyboardInterrupt):
    """A stop signal, raised where a command has no runner to end it cleanly (or after its
    runner stopped on it). A KeyboardInterrupt, so that everything that already cleans up after
    Ctrl-C does after SIGTERM too."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = EXIT_CODES.get(signum, 1)


class Interrupts:
    """Records SIGINT/SIGTERM while `handled`.

    `requested` is the signal that asked for a stop (None: none); `last` keeps it after the
    caller has acted on it and cleared `requested`.
    """

    def __init__(self, kill_all: Callable[[], None]) -> None:
        self.kill_all = kill_all
        self.requested: int | None = None
        self.last: int | None = None

    @contextlib.contextmanager
    def handled(self, clear_after: bool = False, stopping: int | None = None) -> Iterator[None]:
        """SIGINT/SIGTERM are ours inside (main thread only); the old handlers come back after,
        and with `clear_after` the request is forgotten (`last` keeps it). `stopping` is the
        signal whose clean-up runs inside, if one does: a Ctrl-C then counts as the second."""
        if not _can_handle_signals():
            yield
            return
        if stopping is not None:
            self.requested = stopping
        previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
        for s in previous:
            signal.signal(s, self._handle)
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if clear_after:
                self.requested = None

    def _handle(self, signum: int, frame) -> None:
        if self.requested is not None and signum == signal.SIGINT:
            exit_at_once(self.kill_all, 130)
        self.requested = self.last = signum


def _can_handle_signals() -> bool:
    return threading.current_thread() is threading.main_thread() and sys.platform != "win32"


def exit_at_once(kill_all: Callable[[], None], code: int) -> None:
    """The second Ctrl-C: `kill_all()` (children), remove what the normal exit would have, exit.

    `os._exit` skips multiprocessing's exit handlers, which would otherwise remove its temporary
    folder (`/tmp/pymp-*`, where the fork server's socket lives). The fork server is killed
    too: it would exit by itself once this process has, but its teardown (torch is loaded in it)
    takes seconds on a busy machine."""
    try:
        kill_all()
        server = getattr(forkserver._forkserver, "_forkserver_pid", None)
        if server is not None:
            with contextlib.suppress(OSError):
                os.kill(server, signal.SIGKILL)
    finally:
        for path in [util.get_temp_dir(), *_removed_at_hard_exit]:
            shutil.rmtree(path, ignore_errors=True)
        os._exit(code)


def remove_at_hard_exit(path: str) -> None:
    """Have `exit_at_once` remove `path` (a throwaway folder its owner removes on a normal exit)."""
    _removed_at_hard_exit.append(path)


def kill_children() -> None:
    """SIGKILL every live multiprocessing child of this process (a pool's workers), and reap them."""
    children = multiprocessing.active_children()
    for child in children:
        child.kill()
    for child in children:
        child.join(1.0)


@contextlib.contextmanager
def signals_deferred(signums: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """`signums` are blocked in the calling thread inside: a process or thread started here
    inherits the block (through fork and exec), so that none of them reaches it before it has
    chosen how to handle them (`leave_signals_to_the_parent`). A signal sent to this process
    meanwhile waits, or is taken by another thread: none is lost."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signums)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _outlive(signum: int, frame) -> None:
    """A SIGTERM the process lives through. A handler rather than SIG_IGN: a program this
    process execs (an env's helper) gets the default back, not an ignored SIGTERM."""


def _sigterm_kills_again() -> None:
    """In a process forked from one that outlives SIGTERM (an env's worker, which its env may
    end with `Process.terminate()`): SIGTERM kills again, as it would after an exec."""
    with contextlib.suppress(ValueError):  # forked from a thread other than the main one
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def leave_signals_to_the_parent(survive_sigterm: bool = True) -> None:
    """In a child process: SIGINT ignored; SIGTERM ignored too with `survive_sigterm` (a
    component: the runner decides and the host ends it with SIGKILL if need be), else left to
    kill it (a pool worker: `Pool.terminate` ends workers with SIGTERM). Then both unblocked
    (they may have been deferred while it started)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if survive_sigterm:
        signal.signal(signal.SIGTERM, _outlive)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_sigterm_kills_again)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
