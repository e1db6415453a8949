"""A private network namespace for a duel's two games, whose only interface is loopback.

ZDoom binds its netgame port on every interface (INADDR_ANY) and has no option to bind one
address, so a duel hosted in the machine's own namespace can be reached from the network. The
host seat's process therefore starts in a new network namespace (`unshare(CLONE_NEWNET)`) with
its loopback interface up, and the joining seat's process enters that same namespace (`setns`)
before it starts: the two games see each other on 127.0.0.1, nothing else sees them at all.

Both steps run in the child between fork and exec (`preexec_fn`), so the namespace exists before
`Popen` returns. They need CAP_SYS_ADMIN (root, or a container that grants it); where the kernel
refuses, `isolation_problem` says why and the duel runs in the machine's namespace with a warning.

Must not: touch any process but the seat being started (Linux only).
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
from functools import lru_cache

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


# Resolved here, in the parent: a child forked from a threaded process must not dlopen.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))


def enter_new_namespace() -> None:
    """In a child about to exec: a new network namespace with loopback up (`preexec_fn`)."""
    assert _LIBC is not None, "Linux only"
    _check(_LIBC.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
    _loopback_up()


def enter_namespace_of(pid: int) -> Callable[[], None]:
    """A `preexec_fn` that moves the child into the network namespace of process `pid`."""
    path = f"/proc/{pid}/ns/net"

    def enter() -> None:
        assert _LIBC is not None, "Linux only"
        fd = os.open(path, os.O_RDONLY)
        try:
            _check(_LIBC.setns(fd, CLONE_NEWNET), f"setns({path})")
        finally:
            os.close(fd)

    return enter


def namespace_of(pid: int | str = "self") -> str:
    """The network namespace's identity (`net:[inode]`) of process `pid`."""
    return os.readlink(f"/proc/{pid}/ns/net")


@lru_cache(maxsize=1)
def isolation_problem() -> str | None:
    """Why duels cannot run in a private network namespace here, or None (checked once per
    process, with a throwaway child)."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are Linux only (this is {sys.platform})"
    try:
        subprocess.run(
            ["true"],
            preexec_fn=enter_new_namespace,
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
        )
    except (subprocess.SubprocessError, OSError) as error:
        return f"the kernel refused a new network namespace ({error}; it needs CAP_SYS_ADMIN)"
    return None
