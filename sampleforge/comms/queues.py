"""The inter-process queues components talk through: faster-fifo (paper appendix B.1).

faster-fifo is a circular buffer in shared memory guarded by a POSIX mutex, many times faster
than `multiprocessing.Queue` for many-producer, few-consumer traffic. Messages are small (see
`messages.py`); bulk data never travels here. The same queue objects work inside one process,
which is what serial mode uses.
"""

from __future__ import annotations

import pickle
import queue as std_queue
from collections.abc import Iterable
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


PAGE_BYTES = 4096


def map_ring_pages(queues: Iterable[Queue]) -> None:
    """Map every page of each queue's shared ring buffer into this process now.

    A ring's write position moves slowly through it: reports of a few hundred bytes a second
    take hours to go round a 4 MB report queue. Each page a process touches for the first time
    adds to its resident size, so every process's RSS would creep up by a few MB an hour,
    exactly like a leak, until the rings wrap. Reading one byte per page at start makes the
    resident size flat from the start; the pages are shared, so no memory is added.
    """
    for q in queues:
        ring = memoryview(q.shared_memory).cast("B")
        ring[::PAGE_BYTES].tobytes()  # a read faults each page in
