"""Process audits from /proc for tests and fault drills: who descends from whom, who is alive.

Linux only. Zombies (exited, not yet reaped) count as gone.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path


def process_state(pid: int) -> str | None:
    """The one-letter state from /proc/<pid>/stat ("R", "S", "Z", ...), None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def is_alive(pid: int) -> bool:
    state = process_state(pid)
    return state is not None and state != "Z"


def descendants(pid: int) -> set[int]:
    """Every process below `pid` in the process tree."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(fields[1])
            except (OSError, IndexError):
                continue
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def gone_within(pids: Iterable[int], seconds: float) -> bool:
    """Wait up to `seconds` for every process of `pids` to be gone; whether they all are."""
    pids = list(pids)
    deadline = time.monotonic() + seconds
    while any(is_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(is_alive(pid) for pid in pids)
