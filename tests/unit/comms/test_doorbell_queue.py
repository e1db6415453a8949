"""DoorbellQueue (comms/doorbell_queue.py): readers sleep on a pipe that writers ring."""

import multiprocessing
import os
import queue
import signal
import time

import pytest

from sampleforge.comms.doorbell_queue import DoorbellQueue
from sampleforge.comms.queues import receive, send_many


def test_messages_come_out_in_order_and_an_empty_queue_times_out():
    q = DoorbellQueue()
    send_many(q, [1, 2])
    send_many(q, [3])
    assert receive(q, 0.0) == [1, 2, 3]
    t0 = time.monotonic()
    assert receive(q, 0.2) == []
    assert 0.15 < time.monotonic() - t0 < 5
    with pytest.raises(queue.Empty):
        q.get_many(timeout=0.01, max_messages_to_get=10)


def test_a_writer_never_blocks_on_the_bell_even_with_no_reader():
    q = DoorbellQueue()
    for _ in range(100_000):  # far more rings than the pipe holds
        q.ring()
    send_many(q, ["after"])
    assert receive(q, 1.0) == ["after"]
    assert receive(q, 0.05) == []  # the rings were answered; nothing is left to read


def _put_later(q, delay, message):
    time.sleep(delay)
    send_many(q, [message])


def _ring_forever(q):
    # Only the bell: a process killed holding the faster-fifo queue's own lock is a known
    # limit (tests/integration/test_process_faults.py).
    while True:
        q.ring()


@pytest.mark.timeout(120)
def test_a_sleeping_reader_wakes_when_another_process_puts():
    q = DoorbellQueue()
    ctx = multiprocessing.get_context("spawn")
    writer = ctx.Process(target=_put_later, args=(q, 1.0, "hello"))
    writer.start()
    try:
        t0 = time.monotonic()
        assert receive(q, 60.0) == ["hello"]  # woken by the bell, not by the timeout
        assert time.monotonic() - t0 < 30
    finally:
        writer.join(30)


@pytest.mark.timeout(120)
def test_processes_killed_while_ringing_leave_the_bell_working():
    q = DoorbellQueue()
    ctx = multiprocessing.get_context("spawn")
    for _ in range(3):
        spammer = ctx.Process(target=_ring_forever, args=(q,), daemon=True)
        spammer.start()
        time.sleep(1.0)
        os.kill(spammer.pid, signal.SIGKILL)
        spammer.join(10)
    receive(q, 0.0)
    writer = ctx.Process(target=_put_later, args=(q, 0.5, "still works"))
    writer.start()
    try:
        got = []
        deadline = time.monotonic() + 30
        while "still works" not in got and time.monotonic() < deadline:
            got += receive(q, 5.0)
        assert "still works" in got
    finally:
        writer.join(30)
