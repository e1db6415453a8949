"""Signals that arrive before the runner takes over signal handling.

A Ctrl-C during Python's imports can leave a half-imported module behind (the error then looks
like an unrelated AttributeError), so the CLI records SIGINT and SIGTERM from its first line and
acts on them at safe points; the runner installs its own handlers once it starts.
"""

from __future__ import annotations

import signal
from types import FrameType

EXIT_CODES: dict[int, int] = {signal.SIGINT: 130, signal.SIGTERM: 143}

_received: int | None = None


def exit_code_of(stop_signal: int | None) -> int:
    """The exit code of a run that `stop_signal` stopped: 130 (SIGINT), 143 (SIGTERM), or 0
    when no signal stopped it."""
    return 0 if stop_signal is None else EXIT_CODES.get(stop_signal, 1)


def _remember(signum: int, frame: FrameType | None) -> None:
    global _received
    _received = signum


def record_early_signals() -> None:
    """From now until the runner installs its handlers, SIGINT/SIGTERM are only recorded."""
    for signum in EXIT_CODES:
        signal.signal(signum, _remember)


def early_exit_code() -> int | None:
    """130 or 143 if SIGINT or SIGTERM arrived since `record_early_signals`, else None."""
    return None if _received is None else EXIT_CODES[_received]
