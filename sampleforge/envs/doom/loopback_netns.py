"""A private network namespace for a duel's two games, whose only interface is loopback.

ZDoom binds its netgame port on every interface (INADDR_ANY) and has no option to bind one
address, so a duel hosted in the machine's own namespace can be reached from the network. The
host seat's process therefore starts in a new network namespace with its loopback interface up,
and the joining seat's process enters that same namespace (`setns`) before it starts: the two
games see each other on 127.0.0.1, nothing else sees them at all.

There are two routes to such a namespace. `unshare(CLONE_NEWNET)` alone needs CAP_SYS_ADMIN
(root, or a container that grants it). Without it, most kernels still let any user make a new
user namespace with a network namespace inside it (`CLONE_NEWUSER | CLONE_NEWNET`): the process
then holds every capability over that network namespace, enough to bring `lo` up. It first maps
its own uid and gid onto themselves in the user namespace (which needs "deny" written to
`setgroups` first): unmapped, the seat and its engine would see themselves as the overflow id
(65534). Files the seat creates (its engine's names in /dev/shm, its folder) belong to the same
user as before either way; mount and IPC namespaces do not change.
The joiner enters the user namespace first, then the network namespace. :func:`isolation` tries
the plain route, then the nested one, once per process with a throwaway child each, and says
which works, or why neither does.

All steps run in the child between fork and exec (`preexec_fn`), so the namespace exists before
`Popen` returns.

Must not: touch any process but the seat being started, or decide what happens when neither
route works (``duel_seats.py`` does). Linux only.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


# Resolved here, in the parent: a child forked from a threaded process must not dlopen.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _unshare(flags: int, what: str) -> None:
    assert _LIBC is not None, "Linux only"
    _check(_LIBC.unshare(flags), what)


def _setns(fd: int, kind: int, what: str) -> None:
    assert _LIBC is not None, "Linux only"
    _check(_LIBC.setns(fd, kind), what)


def _write_proc_file(name: str, text: str) -> None:
    # One write() per file: the kernel takes a map in a single write and refuses a second.
    fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _map_own_ids(uid: int, gid: int) -> None:
    """Map this process's uid and gid onto themselves in the user namespace it has just made
    (the one mapping an unprivileged process may write)."""
    try:
        _write_proc_file("setgroups", "deny")  # required before gid_map without CAP_SETGID
    except FileNotFoundError:
        pass  # kernels before 3.19 have no setgroups file and need no "deny"
    _write_proc_file("gid_map", f"{gid} {gid} 1")
    _write_proc_file("uid_map", f"{uid} {uid} 1")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))


def enter_new_namespace(with_user_namespace: bool = False) -> None:
    """In a child about to exec: a new network namespace with loopback up, inside a new user
    namespace of its own when `with_user_namespace` (see the module docstring)."""
    if with_user_namespace:
        uid, gid = os.geteuid(), os.getegid()  # as the parent namespace knows them
        _unshare(CLONE_NEWUSER | CLONE_NEWNET, "unshare(CLONE_NEWUSER | CLONE_NEWNET)")
        _map_own_ids(uid, gid)
    else:
        _unshare(CLONE_NEWNET, "unshare(CLONE_NEWNET)")
    _loopback_up()


def new_namespace_step(with_user_namespace: bool) -> Callable[[], None]:
    """A `preexec_fn` that gives the child a new private loopback namespace (host seat)."""

    def enter() -> None:
        enter_new_namespace(with_user_namespace)

    return enter


def enter_namespace_of(pid: int, with_user_namespace: bool = False) -> Callable[[], None]:
    """A `preexec_fn` that moves the child into the network namespace of process `pid` (and,
    first, into its user namespace, when that namespace was made with one)."""
    kinds = [("user", CLONE_NEWUSER)] if with_user_namespace else []
    kinds.append(("net", CLONE_NEWNET))

    def enter() -> None:
        # Opened before any setns: a path is resolved in the namespace the caller is in.
        fds = [(os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY), kind) for name, kind in kinds]
        try:
            for (fd, kind), (name, _) in zip(fds, kinds):
                _setns(fd, kind, f"setns(/proc/{pid}/ns/{name})")
        finally:
            for fd, _ in fds:
                os.close(fd)

    return enter


def namespace_of(pid: int | str = "self", kind: str = "net") -> str:
    """The identity (`net:[inode]`, `user:[inode]`) of process `pid`'s namespace `kind`."""
    return os.readlink(f"/proc/{pid}/ns/{kind}")


@dataclass(frozen=True)
class Isolation:
    """How a duel's games get a private loopback namespace on this machine."""

    # The network namespace is made inside a user namespace of its own (no CAP_SYS_ADMIN).
    user_namespace: bool = False
    # Why neither route works here; None when one does.
    problem: str | None = None


@lru_cache(maxsize=1)
def isolation() -> Isolation:
    """Which route to a private network namespace works here (checked once per process, with a
    throwaway child per route tried)."""
    if not sys.platform.startswith("linux"):
        return Isolation(problem=f"network namespaces are Linux only (this is {sys.platform})")
    plain = _refusal(with_user_namespace=False)
    if plain is None:
        return Isolation()
    nested = _refusal(with_user_namespace=True)
    if nested is None:
        return Isolation(user_namespace=True)
    return Isolation(
        problem=f"the kernel refused a private network namespace ({plain}; that needs "
        f"CAP_SYS_ADMIN) and one inside a new user namespace ({nested}; unprivileged user "
        "namespaces may be disabled here)"
    )


def isolation_problem() -> str | None:
    """Why duels cannot run in a private network namespace here, or None."""
    return isolation().problem


def _refusal(with_user_namespace: bool) -> str | None:
    """Why a child cannot enter a new namespace by this route, or None when it can."""
    read_end, write_end = os.pipe()

    def enter() -> None:
        try:
            enter_new_namespace(with_user_namespace)
        except OSError as error:
            # subprocess only says "Exception occurred in preexec_fn": pass on the real reason.
            os.write(write_end, str(error).encode()[:1000])
            raise

    try:
        subprocess.run(
            ["true"],
            preexec_fn=enter,
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
        )
        failure = None
    except (subprocess.SubprocessError, OSError) as error:
        failure = str(error)
    finally:
        os.close(write_end)
        with os.fdopen(read_end, "rb") as reason:
            told = reason.read().decode(errors="replace")
    if failure is None:
        return None
    return told or failure
