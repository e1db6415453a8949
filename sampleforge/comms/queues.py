"""The inter-process queues components talk through: faster-fifo (paper appendix B.1).

faster-fifo is a circular buffer in shared memory guarded by a POSIX mutex, many times faster
than `multiprocessing.Queue` for many-producer, few-consumer traffic. Messages are small (see
`messages.py`); bulk data never travels here. The same queue objects work inside one process,
which is what serial mode uses.
"""

from __future__ import annotations

import pickle
import queue as std_queue
from typing import Any

from faster_fifo import Queue

DEFAULT_QUEUE_BYTES = 1 << 20


def _dumps(message: Any) -> bytes:
    # Plain pickle: messages never hold tensors or file descriptors, so the multiprocessing
    # pickler (and its per-message setup cost) is not needed.
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def make_queue(max_size_bytes: int = DEFAULT_QUEUE_BYTES) -> Queue:
    """A new inter-process queue holding at most `max_size_bytes` of pickled messages."""
    return Queue(max_size_bytes=max_size_bytes, dumps=_dumps, loads=pickle.loads)


def receive(q: Queue, timeout: float, max_messages: int = 1 << 16) -> list[Any]:
    """Every message available now, or those arriving within `timeout` s (0: don't wait)."""
    try:
        if timeout <= 0:
            return q.get_many_nowait(max_messages_to_get=max_messages)
        return q.get_many(timeout=timeout, max_messages_to_get=max_messages)
    except std_queue.Empty:
        return []


def send_many(q: Queue, messages: list[Any], timeout: float = 10.0) -> None:
    """Put messages in one call (one lock acquisition); raises queue.Full after `timeout`."""
    if messages:
        q.put_many(messages, timeout=timeout)
