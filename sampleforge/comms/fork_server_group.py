"""Preloaded by multiprocessing's fork server: the server leads a process group of its own.

The server is the parent of every component process, and each arms a parent-death signal. In the
runner's process group, a signal sent to the group (`kill -TERM -- -PGID`, a job scheduler
stopping the job) reaches the server too: SIGINT it ignores, but SIGTERM kills it, and with it,
through their parent-death signal, every component, before the learner can write its final
checkpoint. Out of that group, the runner alone gets the signal and decides how to stop. The
server still exits when the runner does (its "alive" pipe closes).

Importing this module anywhere but in the fork server does nothing.
"""

from __future__ import annotations

import os

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
