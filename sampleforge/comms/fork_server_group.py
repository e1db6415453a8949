"""Preloaded by multiprocessing's fork server: the server leads a process group of its own, and
lives through SIGINT and SIGTERM.

The server is the parent of every component process, and each arms a parent-death signal: the
server's death kills every component, before the learner can write its final checkpoint. In the
runner's process group, a signal sent to the group (`kill -TERM -- -PGID`) would reach it; out
of that group it still gets one sent to every process of the run (`systemctl stop`, a job
scheduler, `pkill -s`), so it ignores both and the runner alone decides how to stop. The server
still exits when the runner does (its "alive" pipe closes). Its children are forked with both
ignored, until `component_process` sets them itself.

Importing this module anywhere but in the fork server does nothing.
"""

from __future__ import annotations

import os
import signal

# The command multiprocessing starts its fork server with (`forkserver.ensure_running`).
_SERVER_COMMAND = b"from multiprocessing.forkserver import main"


def _in_fork_server() -> bool:
    try:
        with open("/proc/self/cmdline", "rb") as cmdline:
            return _SERVER_COMMAND in cmdline.read()
    except OSError:
        return False  # not Linux: there is no fork server


if _in_fork_server():
    os.setpgid(0, 0)
    for _signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_signum, signal.SIG_IGN)
    # The host started the server with both deferred (`interrupts.signals_deferred`).
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, signal.SIGTERM))
