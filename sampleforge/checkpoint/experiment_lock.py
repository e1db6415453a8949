"""One run per experiment: an exclusive OS lock on `train_dir/.<experiment>.lock`.

Two runs in one experiment folder overwrite each other's config.json, prune each other's
in-flight checkpoint writes, and an overwrite deletes the folder under a running learner. So
the runner holds this lock for its whole life (from before anything in the folder changes
until `close`), and a second run is refused with a one-line `ConfigError` naming the process
that holds it (pid, host, command: written into the lock file by the holder).

Why beside the folder and not in it: `--restart_behavior overwrite` deletes the folder, and a
lock on a deleted file no longer stops anyone.

Why a POSIX record lock (`fcntl.lockf`) and not `flock`: a record lock belongs to the process
that took it. Children never hold it (fork does not inherit it), so it goes the moment the
runner dies, even while a child forked by an env or the fork server is still alive; a `flock`
lock belongs to the open file description, which every forked child shares, so a lingering
child would keep it. The descriptor is also opened `O_CLOEXEC`, so no exec'd program keeps the
file open. Record locks have two traps, both handled here: they do not conflict within one
process (two `APPO` objects on one experiment), and closing *any* descriptor of the file drops
the process's lock. So this module keeps a registry of the lock files its process holds,
checked before a file is opened, and opens each at most once.

The file is unlinked on release. A run that opened it just before could then lock the
unlinked file, so after locking, a run checks that the path still names the file it locked,
and starts again if not.

Must not: wait for a lock (a second run is refused at once), or decide anything about the
experiment folder's contents.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from sampleforge.config import ConfigError

log = logging.getLogger(__name__)

LOCK_PREFIX, LOCK_SUFFIX = ".", ".lock"
# Bytes the lock file's name adds to the experiment's (validation keeps the sum within 255).
LOCK_NAME_EXTRA_BYTES = len(LOCK_PREFIX) + len(LOCK_SUFFIX)
_COMMAND_CHARS = 200  # of the holder's command line, in the refusal message
_ATTEMPTS = 10  # each retry means a holder released the file while we were locking it

# Lock files this process holds (absolute paths); guarded by _registry_guard, reentrant
# because a collected lock's finalizer may run inside `acquire`.
_held: set[str] = set()
_registry_guard = threading.RLock()


def lock_path(train_dir: Path, experiment: str) -> Path:
    """The lock file of `train_dir/<experiment>`: `.<experiment>.lock` beside it."""
    return Path(train_dir) / f"{LOCK_PREFIX}{experiment}{LOCK_SUFFIX}"


class ExperimentLock:
    """An exclusive lock on one experiment, held until `release` (or garbage collection)."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path = path
        self._finalizer = weakref.finalize(self, _release, path, fd, os.getpid())

    @classmethod
    def acquire(cls, train_dir: Path, experiment: str) -> "ExperimentLock":
        """Lock `train_dir/<experiment>`; ConfigError naming the holder if a live process has it.

        A lock left by a dead process does not count: the OS dropped it when the process died.
        """
        path = lock_path(train_dir, experiment).absolute()
        with _registry_guard:
            if str(path) in _held:
                raise ConfigError([_refusal(path, _holder_info(), "this process")])
            try:
                Path(train_dir).mkdir(parents=True, exist_ok=True)
                fd = _lock_file(path)
            except OSError as e:
                raise ConfigError(
                    [
                        f"cannot create the experiment's lock file {path}: "
                        f"{e.strerror or e} (check --train_dir {train_dir})"
                    ]
                ) from None
            if fd is not None:
                _held.add(str(path))
            return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._finalizer.alive

    def release(self) -> None:
        """Unlock and remove the lock file. Safe to call twice."""
        self._finalizer()

    def __enter__(self) -> "ExperimentLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _lock_file(path: Path) -> int | None:
    """An open descriptor of `path` holding its record lock; None where the file system has
    no locks (then a warning: nothing stops a second run). ConfigError if another run holds
    it."""
    for _ in range(_ATTEMPTS):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)  # we hold no record lock on this file, so closing drops nothing
            if e.errno in (errno.EACCES, errno.EAGAIN):
                raise ConfigError([_refusal(path, _read_holder(path), "another run")]) from None
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                log.warning(
                    "cannot lock %s (%s): nothing stops a second run from using this experiment",
                    path,
                    e.strerror,
                )
                return None
            raise
        if _names_this_file(path, fd):
            _write_holder(fd)
            return fd
        os.close(fd)  # its holder released and unlinked it meanwhile: lock the new one
    raise OSError(errno.EAGAIN, f"the lock file kept changing under us ({_ATTEMPTS} tries)")


def _names_this_file(path: Path, fd: int) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)


def _holder_info() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": " ".join(sys.argv),
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def _write_holder(fd: int) -> None:
    """Who holds the lock, for the message a refused run prints (best effort: a full disk
    must not stop the run that got the lock)."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder_info()).encode(), 0)
    except OSError:
        pass


def _read_holder(path: Path) -> dict[str, Any]:
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # the holder is just starting (or could not write it)
    return info if isinstance(info, dict) else {}


def _refusal(path: Path, holder: dict[str, Any], who: str) -> str:
    pid = holder.get("pid", "unknown")
    details = [f"host {holder['host']}"] if holder.get("host") else []
    if holder.get("since"):
        details.append(f"since {holder['since']}")
    if holder.get("command"):
        command = " ".join(str(holder["command"]).split())  # one line
        if len(command) > _COMMAND_CHARS:
            command = command[: _COMMAND_CHARS - 3] + "..."
        details.append(f"command: {command}")
    experiment = path.with_name(path.name[len(LOCK_PREFIX) : -len(LOCK_SUFFIX)])
    return (
        f"experiment {experiment} is in use by {who} (pid {pid}; {'; '.join(details)}): wait "
        "for it to end, stop it, or give another --experiment"
    )


def _release(path: Path, fd: int | None, owner_pid: int) -> None:
    if os.getpid() != owner_pid:
        return  # a forked child exiting: the lock and the file are its parent's
    with _registry_guard:
        if fd is None:
            return
        try:
            # Unlinked while still locked: a run that opened it meanwhile sees the path no
            # longer names its file and starts again (see the module docstring).
            path.unlink(missing_ok=True)
        except OSError:
            pass  # a read-only train_dir: the file stays, unlocked
        os.close(fd)
        _held.discard(str(path))
