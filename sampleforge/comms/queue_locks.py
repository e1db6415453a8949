"""Releasing a queue's lock that a killed process still holds.

faster-fifo guards each queue with a process-shared pthread mutex that is not robust: a process
SIGKILLed while holding it leaves it locked, and every later get or put on that queue would
block for ever. The runner sees every death (`components.supervisor`); it then asks, for each
queue, whether the dead process holds its lock, and if so releases it on the dead process's
behalf. glibc lets any thread unlock a mutex of the default (non-robust, non-error-checking)
kind, which is what faster-fifo creates.

This reads glibc's `pthread_mutex_t` (`int __lock; unsigned __count; int __owner` [the owner's
thread id]; ...; `int __kind` at byte 16) inside faster-fifo's `struct Queue` (`size_t
max_size_bytes` at byte 0, the mutex at byte 56). Each queue's layout is checked before anything
is touched (its size field and the mutex kind must read back as expected); where it does not
match, nothing is done and `lock_owner` says it cannot tell.

The queue's contents are left as they are. A process killed holding the lock was almost always
between copies, and the queue is consistent. Killed in the middle of copying a message (a window
of well under a microsecond), it leaves that message torn, and the next reader of that queue
fails with an error: the run fails or that component is replaced, by the supervisor's policy.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
import sys
from typing import Any

from sampleforge.comms.doorbell_queue import DoorbellQueue

_MUTEX_OFFSET = 56
_KIND_PROCESS_SHARED = 128  # PTHREAD_MUTEX_PSHARED_BIT on a default-kind mutex

_libc: ctypes.CDLL | None = None


def _pthread() -> ctypes.CDLL | None:
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _libc.pthread_mutex_unlock.argtypes = [ctypes.c_void_p]
    return _libc


def lock_owner(q: Any) -> int | None:
    """Thread id holding `q`'s lock, 0 when free, None when the layout is not the known one."""
    q = _fifo(q)
    buffer = getattr(q, "queue_obj_buffer", None)
    if buffer is None or not sys.platform.startswith("linux") or len(buffer) < _MUTEX_OFFSET + 20:
        return None
    raw = bytes(buffer[: _MUTEX_OFFSET + 20])
    (max_size,) = struct.unpack_from("N", raw, 0)
    locked, _, owner, _, kind = struct.unpack_from("iIiIi", raw, _MUTEX_OFFSET)
    if max_size != q.max_size_bytes or kind != _KIND_PROCESS_SHARED:
        return None
    return owner if locked else 0


def release_if_held_by(q: Any, pid: int) -> bool:
    """Unlock `q` if the (dead) process `pid` holds its lock; True if it did.

    Only for a process that is gone: its main thread's id is its pid, and no thread of it
    can touch the queue again.
    """
    libc = _pthread()
    if libc is None or lock_owner(q) != pid:
        return False
    libc.pthread_mutex_unlock(ctypes.addressof(_fifo(q).queue_obj_buffer) + _MUTEX_OFFSET)
    return True


def _fifo(q: Any) -> Any:
    return q.queue if isinstance(q, DoorbellQueue) else q
