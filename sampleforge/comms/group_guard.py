"""Nothing a component started outlives it: its process group is killed when it ends.

Every component process leads its own process group (`component_process.component_main`), so
whatever it starts is in that group: a ViZDoom engine, a simulator binary, a helper an env
runs. A component that ends normally closes its envs, which stop their helpers; one that is
SIGKILLed, dies of a segfault or is killed as hung cannot, and its helpers would run on
orphaned, holding memory, CPU and shared memory until the machine reboots (ViZDoom's engine
waits for its controller forever). So:

- while the runner lives, `ProcessHost` kills a component's group as soon as it sees the
  component end (`end_group`);
- for when the runner itself dies (SIGKILL, OOM), a `GroupGuard` process, started in a session
  of its own so that no signal sent to the run's group or terminal reaches it, holds the list
  of live groups and kills them all once the runner's end of its pipe closes, however the
  runner went. It ignores SIGINT and SIGTERM, which still reach it when they are sent to every
  process of the run (`systemctl stop`, a scheduler): the runner may stop cleanly and close
  it, or die later, and the guard must still be there to clean up.

A helper that moves itself into another group or session (a ViZDoom duel seat does) is out of
reach: it must watch its parent itself (`envs/doom/duel_seat_server.py`).

Must not: import torch or anything heavy (the guard process imports this module alone).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

# The guard process's program: this module's `main`, imported from where this copy of it is.
_START = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from sampleforge.comms.group_guard import main; main()"
)


def lead_own_group() -> None:
    """Make the calling process the leader of a new process group (children inherit it)."""
    if hasattr(os, "setpgid"):
        os.setpgid(0, 0)


def end_group(group: int) -> None:
    """SIGKILL every process left in process group ``group``; a group already empty is fine."""
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # nothing left in it (or, not ours: never signal what we do not own)


class GroupGuard:
    """A process that kills the watched process groups when this process ends.

    `watch(group)` after a component starts, `forget(group)` once its group has been ended,
    `close()` when no component is left. If the guard itself has died, watching goes on
    without it (logged once): it protects against leaks, it is never needed to run."""

    def __init__(self) -> None:
        from sampleforge.comms.interrupts import signals_deferred  # here: the guard needs none

        package_parent = str(Path(__file__).resolve().parents[2])
        try:
            with signals_deferred():  # until its `main` ignores them
                self._process: subprocess.Popen | None = subprocess.Popen(
                    [sys.executable, "-c", _START, package_parent],
                    stdin=subprocess.PIPE,
                    start_new_session=True,
                )
        except OSError as e:
            log.warning("no process-group guard (%s); helpers of a killed runner may leak", e)
            self._process = None

    def watch(self, group: int) -> None:
        self._send(f"+{group}\n")

    def forget(self, group: int) -> None:
        self._send(f"-{group}\n")

    def close(self) -> None:
        """Let the guard go: it ends the groups still watched, then exits."""
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None
        try:
            process.stdin.close()
        except OSError:
            pass  # it had exited
        try:
            process.wait(5.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _send(self, line: str) -> None:
        process = self._process  # close() may run meanwhile, in another thread
        if process is None or process.stdin is None:
            return
        try:
            process.stdin.write(line.encode())
            process.stdin.flush()
        except (OSError, ValueError):  # it has exited, or close() closed its pipe
            if self._process is process:
                log.warning("the process-group guard exited; helpers of a killed runner may leak")
                self._process = None


def watched_groups(lines) -> set[int]:
    """Read ``+group`` / ``-group`` lines until they end; returns the groups still watched."""
    groups: set[int] = set()
    for line in lines:
        text = line.strip()
        if text[:1] == b"+":
            groups.add(int(text[1:]))
        elif text[:1] == b"-":
            groups.discard(int(text[1:]))
    return groups


def main() -> None:
    stop_signals = (signal.SIGINT, signal.SIGTERM)
    for signum in stop_signals:  # only the runner's end closing its pipe ends the guard
        signal.signal(signum, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)  # deferred while it started
    for group in watched_groups(sys.stdin.buffer):
        end_group(group)


if __name__ == "__main__":
    main()
