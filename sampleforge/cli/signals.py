"""SIGINT and SIGTERM in the CLI: recorded until a safe point, then acted on.

A Ctrl-C during Python's imports can leave a half-imported module behind (the error then looks
like an unrelated AttributeError), so the CLI records SIGINT and SIGTERM from its first line and
acts on them at safe points. `train`'s runner installs its own handlers once it starts. The
commands without a runner (`enjoy`, `eval`, `bench`) call `stop_on_signals` once their imports
are done: from then on the first signal raises `Interrupted` (exit 130 or 143, after the usual
clean-up: pools terminated, temporary folders removed), and a second Ctrl-C kills every child
process and exits at once.
"""

from __future__ import annotations

import signal
from types import FrameType

# Imports stay minimal: until `record_early_signals` runs, a signal still kills the process.
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
    global _received
    _received = None
    for signum in EXIT_CODES:
        signal.signal(signum, _remember)


def early_exit_code() -> int | None:
    """130 or 143 if SIGINT or SIGTERM arrived since `record_early_signals`, else None."""
    return None if _received is None else EXIT_CODES[_received]


def _raise_once(signum: int, frame: FrameType | None) -> None:
    from sampleforge.comms.interrupts import Interrupted, exit_at_once, kill_children

    global _received
    if _received is None:
        _received = signum
        raise Interrupted(signum)
    if signum == signal.SIGINT:  # a second Ctrl-C: the clean-up is taking too long
        exit_at_once(kill_children, EXIT_CODES[signal.SIGINT])


def stop_on_signals() -> None:
    """From now on the first SIGINT/SIGTERM raises `comms.interrupts.Interrupted` in the main
    thread; one that arrived earlier raises it at once. Later ones let the clean-up finish,
    except a second Ctrl-C, which ends it at once."""
    from sampleforge.comms.interrupts import Interrupted

    for signum in EXIT_CODES:
        signal.signal(signum, _raise_once)
    if _received is not None:
        raise Interrupted(_received)
