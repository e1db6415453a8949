"""GroupGuard (comms/group_guard.py): the process groups it watches die with its owner."""

import os
import signal
import subprocess
import sys
import time

import pytest

from sampleforge.comms.group_guard import watched_groups
from sampleforge.testing.processes import gone_within, is_alive

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# The guard's owner: starts two `sleep`s, each leading a group of its own, watches both,
# forgets the second, prints their pids, then waits to be killed.
OWNER = """
import subprocess, sys, time
from sampleforge.comms.group_guard import GroupGuard
guard = GroupGuard()
sleeps = [subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in range(2)]
for s in sleeps:
    guard.watch(s.pid)
guard.forget(sleeps[1].pid)
print(sleeps[0].pid, sleeps[1].pid, flush=True)
time.sleep(600)
"""


def test_the_guard_keeps_the_groups_still_watched():
    lines = [b"+5\n", b"+7\n", b"+9\n", b"-5\n", b"-11\n", b"\n"]
    assert watched_groups(lines) == {7, 9}


@pytest.mark.timeout(60)
def test_a_killed_owners_watched_groups_are_killed_and_only_those():
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    watched, forgotten = map(int, owner.stdout.readline().split())
    try:
        assert is_alive(watched) and is_alive(forgotten)
        owner.kill()  # no close(), no finalizer: as the OOM killer would
        owner.wait()
        assert gone_within([watched], 5.0), "a watched group outlived the guard's owner"
        time.sleep(0.5)
        assert is_alive(forgotten), "a forgotten group was killed"
    finally:
        for pid in (watched, forgotten):
            if is_alive(pid):
                os.kill(pid, signal.SIGKILL)
