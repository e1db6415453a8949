"""What ViZDoom engines leave in /dev/shm, and how to clean up after killed ones.

Each game has an instance id (10 random characters, passed to its engine process as
``+viz_instance_id``) and names its message queues and shared memory after it:
``/dev/shm/ViZDoom{MQCtr,MQDoom,SM}<id>``. A game closed normally removes them; an engine killed
with its env (a SIGKILLed rollout worker, a stopped duel seat) does not, and a later engine that
draws a colliding id fails with "File exists".

Must not: import vizdoom (seat processes and the runner use this without it).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

SHM = Path("/dev/shm")
KINDS = ("MQCtr", "MQDoom", "SM")
# A game creates its queues before its engine process exists: a younger name may be a game
# that is still starting, never an orphan.
ORPHAN_MIN_AGE_SEC = 60.0


def engine_instance_ids(group: int | None = None) -> list[str]:
    """The instance id of every live vizdoom engine (only those of process group ``group``, if
    given)."""
    ids = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_file.read_text()
            name = stat[: stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            if "vizdoom" not in name or (group is not None and int(fields[2]) != group):
                continue
            args = (stat_file.parent / "cmdline").read_bytes().decode().split("\0")
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we looked, or /proc is not Linux's
        if "+viz_instance_id" in args[:-1]:
            ids.append(args[args.index("+viz_instance_id") + 1])
    return ids


def engine_ipc_held_by(pid: int) -> list[str]:
    """The instance ids of the engine names process ``pid`` holds, mapped or open: a game's
    controller creates its engine's queues and shared memory before the engine process runs and
    maps them until it closes, so this finds them when the engine has died or not yet started.
    A name is open (``shm_open``) before it is mapped, so a process stopped between the two is
    caught by its open file descriptors."""
    proc = Path(f"/proc/{pid}")
    try:
        paths = [line.split(maxsplit=5)[-1] for line in (proc / "maps").read_text().splitlines()]
        for fd in (proc / "fd").iterdir():
            try:
                paths.append(os.readlink(fd))
            except OSError:
                continue  # closed while we looked
    except OSError:
        return []  # gone, or not ours to read
    ids = set()
    for path in paths:
        directory, _, name = path.rpartition("/")
        if directory != str(SHM) or name.endswith(" (deleted)"):
            continue  # not an engine's, or already removed
        for kind in KINDS:
            if name.startswith(f"ViZDoom{kind}"):
                ids.add(name[len(f"ViZDoom{kind}") :])
    return sorted(ids)


def remove_engine_ipc(instance_ids: list[str]) -> None:
    """Remove what the engines ``instance_ids`` left in /dev/shm."""
    for instance in instance_ids:
        for kind in KINDS:
            (SHM / f"ViZDoom{kind}{instance}").unlink(missing_ok=True)


def remove_orphan_engine_ipc(min_age_sec: float = ORPHAN_MIN_AGE_SEC) -> list[str]:
    """Remove the /dev/shm names of engines that no longer run (older than ``min_age_sec``);
    returns the instance ids removed."""
    live = set(engine_instance_ids())
    now = time.time()
    orphans = set()
    for kind in KINDS:
        for path in SHM.glob(f"ViZDoom{kind}*"):
            instance = path.name[len(f"ViZDoom{kind}") :]
            try:
                old = now - path.stat().st_mtime >= min_age_sec
            except OSError:
                continue  # removed meanwhile
            if old and instance not in live:
                orphans.add(instance)
    remove_engine_ipc(sorted(orphans))
    return sorted(orphans)
