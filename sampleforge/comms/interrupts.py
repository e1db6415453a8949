"""Ctrl-C and SIGTERM while a run starts or trains: the first asks for a clean stop, a second
Ctrl-C kills every child process and exits at once."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator


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
    def handled(self, clear_after: bool = False) -> Iterator[None]:
        """SIGINT/SIGTERM are ours inside (main thread only); the old handlers come back after,
        and with `clear_after` the request is forgotten (`last` keeps it)."""
        if threading.current_thread() is not threading.main_thread() or sys.platform == "win32":
            yield
            return
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
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
            self.kill_all()
            os._exit(130)
        self.requested = self.last = signum
