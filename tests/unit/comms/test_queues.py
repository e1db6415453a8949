"""Queue helpers: mapping a ring's pages up front, and finding the queues a component holds."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from sampleforge.comms.component_process import queues_in
from sampleforge.comms.doorbell_queue import DoorbellQueue
from sampleforge.comms.queues import make_queue, map_ring_pages, receive, send_many


def _shmem_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssShmem:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no RssShmem in /proc/self/status")


def _map_in_child(q, results) -> None:
    before = _shmem_mb()
    map_ring_pages([q])
    mapped = _shmem_mb()
    map_ring_pages([q])
    results.send((before, mapped, _shmem_mb(), receive(q, 1.0)))


def test_a_process_that_maps_a_ring_has_all_its_pages_resident_and_it_still_works() -> None:
    # The creator has zeroed the ring (all resident); a spawned process that attached to it
    # has only the pages it touched.
    q = make_queue(8 << 20)
    send_many(q, ["one", {"two": 2}])
    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("spawn").Process(target=_map_in_child, args=(q, theirs))
    child.start()
    before, mapped, again, received = ours.recv()
    child.join(10)
    assert mapped - before >= 7.5  # the whole 8 MB ring, not only pages written so far
    assert again - mapped < 0.5  # mapped already: nothing more
    assert received == ["one", {"two": 2}]


def test_queues_in_finds_queues_in_nested_arguments_and_inside_doorbells() -> None:
    plain, inbox, doorbell = make_queue(1 << 16), make_queue(1 << 16), DoorbellQueue(1 << 16)
    kwargs = {
        "report_queue": plain,
        "inboxes": [[inbox]],
        "requests": {0: doorbell},
        "other": ("text", 3, None),
    }
    assert [id(q) for q in queues_in(kwargs)] == [id(plain), id(inbox), id(doorbell.queue)]
