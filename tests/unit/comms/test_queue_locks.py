"""queue_locks (comms/queue_locks.py): a lock held by a thread that is gone can be released."""

import ctypes
import threading

import pytest

from sampleforge.comms.doorbell_queue import DoorbellQueue
from sampleforge.comms.queue_locks import _MUTEX_OFFSET, lock_owner, release_if_held_by
from sampleforge.comms.queues import make_queue, receive, send_many
from sampleforge.testing.ci import unavailable


def _lock_from_a_thread_that_then_ends(q) -> int:
    """Take the queue's mutex in another thread, which exits holding it; returns its id."""
    fifo = q.queue if isinstance(q, DoorbellQueue) else q
    address = ctypes.addressof(fifo.queue_obj_buffer) + _MUTEX_OFFSET
    libc = ctypes.CDLL(None)
    libc.pthread_mutex_lock.argtypes = [ctypes.c_void_p]
    tid = []

    def hold():
        tid.append(threading.get_native_id())
        assert libc.pthread_mutex_lock(address) == 0

    thread = threading.Thread(target=hold)
    thread.start()
    thread.join()
    return tid[0]


@pytest.mark.parametrize("make", [make_queue, DoorbellQueue])
def test_a_lock_left_held_is_seen_and_released(make):
    q = make()
    if lock_owner(q) is None:
        unavailable("unknown faster-fifo / glibc layout")
    assert lock_owner(q) == 0
    tid = _lock_from_a_thread_that_then_ends(q)
    assert lock_owner(q) == tid
    assert not release_if_held_by(q, tid + 1)  # someone else's lock is never touched
    assert lock_owner(q) == tid
    assert release_if_held_by(q, tid)
    assert lock_owner(q) == 0
    send_many(q, ["works again"], timeout=1.0)  # would block for ever on the held lock
    assert receive(q, 1.0) == ["works again"]


def test_an_unknown_layout_is_left_alone():
    class NotAFasterFifoQueue:
        max_size_bytes = 10
        queue_obj_buffer = bytes(100)

    assert lock_owner(NotAFasterFifoQueue()) is None
    assert not release_if_held_by(NotAFasterFifoQueue(), 0)
