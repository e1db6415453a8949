"""SlotPool: each invariant of its module docstring, one test each (numbered as there)."""

import glob
import multiprocessing
import os
import tempfile
import threading

import pytest

from sampleforge.buffers import slot_pool
from sampleforge.buffers.sampler_ledger import SamplerLedger
from sampleforge.buffers.slot_pool import SlotPool
from sampleforge.comms.queues import receive, send_many

SLOTS = 4


@pytest.fixture
def pool() -> SlotPool:
    return SlotPool.create(SamplerLedger(num_workers=2, num_slots=SLOTS, num_policies=2))


def _free(pool: SlotPool) -> list[int]:
    """Drain the free queue (and put the slots back), to look at it."""
    free = receive(pool.free_queue, 0.05)
    send_many(pool.free_queue, free)
    return free


def _states(pool: SlotPool) -> tuple[list[int], dict[int, int], set[int]]:
    free = _free(pool)
    owners = pool.ledger.slot_owners.tolist()
    filling = {s: w for s, w in enumerate(owners) if w >= 0}
    handed_over = {s for s in range(SLOTS) if pool.ledger.slot_readers[s].any()}
    return free, filling, handed_over


def test_1_every_slot_is_in_exactly_one_state(pool):
    a = pool.acquire(worker=0)
    b = pool.acquire(worker=1)
    pool.hand_over(b, readers=[0])
    free, filling, handed_over = _states(pool)
    assert sorted(free) == sorted(set(range(SLOTS)) - {a, b})
    assert filling == {a: 0} and handed_over == {b}


def test_2_a_slot_is_acquired_by_one_worker_until_handed_over(pool):
    taken = [pool.acquire(worker=w % 2) for w in range(SLOTS)]
    assert sorted(taken) == list(range(SLOTS))
    assert pool.acquire(worker=0) is None  # all being filled: nothing to give, no waiting
    pool.hand_over(taken[0], readers=[0])
    assert pool.acquire(worker=0) is None  # handed over is not free either
    assert pool.ledger.slots_of(0) == sorted(taken[0::2][1:])


def test_3_the_returner_gives_a_slot_back_once_after_every_reader_copied(pool):
    slot = pool.acquire(worker=0)
    pool.hand_over(slot, readers=[0, 1])
    pool.copied(slot, policy=0)
    assert pool.release_copied([slot]) == [slot]  # policy 1 has not copied yet
    assert slot not in _free(pool)
    pool.copied(slot, policy=1)
    assert pool.release_copied([slot]) == []
    assert _free(pool).count(slot) == 1


def test_3_a_slot_nobody_learns_from_is_free_at_once(pool):
    slot = pool.acquire(worker=0)
    pool.hand_over(slot, readers=[])  # only frozen opponents acted in it
    assert _free(pool).count(slot) == 1
    assert pool.ledger.slots_of(0) == []


def test_4_reclaim_frees_exactly_the_dead_workers_slots(pool):
    mine = [pool.acquire(worker=0), pool.acquire(worker=0)]
    theirs = pool.acquire(worker=1)
    handed = pool.acquire(worker=0)
    pool.hand_over(handed, readers=[0])
    assert sorted(pool.reclaim(worker=0)) == sorted(mine)
    free, filling, handed_over = _states(pool)
    assert sorted(free) == sorted(mine)  # not the handed-over one: its learner still reads it
    assert filling == {theirs: 1} and handed_over == {handed}


def test_5_no_slot_while_the_learners_have_enough_on_their_way(pool):
    pool.ledger.set_sampling_slots(0, 1)
    pool.ledger.set_sampling_slots(1, 0)
    first = pool.acquire(worker=0)
    assert first is not None
    assert pool.acquire(worker=1) is None  # policy 0 has its one slot on its way
    pool.hand_over(first, readers=[0])
    assert pool.acquire(worker=1) is None  # still on its way until copied
    pool.copied(first, policy=0)
    assert pool.acquire(worker=1) is not None


def _die_between_taking_and_recording(pool: SlotPool) -> None:
    """What a rollout worker killed inside `acquire` leaves: a slot off the free queue, not
    recorded as its own (the lock it held dies with it)."""
    with pool._moving():
        pool.free_queue.get(block=False)
        os._exit(0)


def test_4_reclaim_recovers_a_slot_taken_off_the_queue_but_not_recorded(pool):
    mine = pool.acquire(worker=0)
    process = multiprocessing.get_context("spawn").Process(
        target=_die_between_taking_and_recording, args=(pool,)
    )
    process.start()
    process.join(60)
    assert process.exitcode == 0
    (lost,) = set(range(SLOTS)) - set(_free(pool)) - {mine}  # in nobody's hands
    assert sorted(pool.reclaim(worker=0)) == sorted([mine, lost])
    free, filling, handed_over = _states(pool)
    assert sorted(free) == list(range(SLOTS)) and not filling and not handed_over


def _take_slowly(pool: SlotPool, got, go) -> None:
    """A live worker in the middle of an acquire while another worker is reclaimed."""
    with pool._moving():
        slot = pool.free_queue.get(block=False)
        got.set()
        go.wait(60)
        pool.ledger.take(slot, 1)


def test_4_reclaim_waits_for_a_live_worker_halfway_through_an_acquire(pool):
    context = multiprocessing.get_context("spawn")
    got, go = context.Event(), context.Event()
    process = context.Process(target=_take_slowly, args=(pool, got, go))
    process.start()
    assert got.wait(60)
    reclaimed: list[list[int]] = []
    reclaiming = threading.Thread(target=lambda: reclaimed.append(pool.reclaim(worker=0)))
    reclaiming.start()
    reclaiming.join(0.5)
    assert reclaiming.is_alive()  # it waits for the acquire to finish
    go.set()
    reclaiming.join(60)
    process.join(60)
    assert reclaimed == [[]]  # the slot in the live worker's hands was not counted lost
    free, filling, _ = _states(pool)
    assert sorted(free + list(filling)) == list(range(SLOTS)) and list(filling.values()) == [1]


def test_4_reclaim_gives_back_nothing_twice(pool):
    """Slots on their way back to the queue are not counted lost."""
    slot = pool.acquire(worker=0)
    pool.hand_over(slot, readers=[0])
    pool.copied(slot, policy=0)
    assert pool.reclaim(worker=1) == []
    assert pool.release_copied([slot]) == []
    assert sorted(_free(pool)) == list(range(SLOTS))


def _hold_the_lock(pool: SlotPool, holding, release) -> None:
    with pool._moving():
        holding.set()
        release.wait(60)


def test_4_reclaim_does_not_hang_on_a_stuck_move(pool, monkeypatch, caplog):
    """A live process stuck in the middle of a move: reclaim gives up the count, not the run."""
    monkeypatch.setattr(slot_pool, "RECLAIM_LOCK_TIMEOUT_SEC", 0.2)
    mine = pool.acquire(worker=0)
    context = multiprocessing.get_context("spawn")
    holding, release = context.Event(), context.Event()
    process = context.Process(target=_hold_the_lock, args=(pool, holding, release))
    process.start()
    try:
        assert holding.wait(60)
        assert pool.reclaim(worker=0) == [mine]
        assert "held the slot lock" in caplog.text
    finally:
        release.set()
        process.join(60)
    assert sorted(_free(pool)) == list(range(SLOTS))


def test_the_lock_file_leaves_nothing_behind():
    """The file is unlinked at once; processes hold it through their descriptors."""
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "sampleforge-slots-*")))
    pool = SlotPool.create(SamplerLedger(num_workers=1, num_slots=2))
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "sampleforge-slots-*"))) == before
    assert pool.acquire(worker=0) is not None  # and it still locks
    fd = pool._lock_fd
    del pool  # dropped without close: its descriptor goes with it
    with pytest.raises(OSError):
        os.fstat(fd)


def _acquire_in_child(pool: SlotPool) -> None:
    pool.acquire(worker=1)


def test_a_handle_in_another_process_shares_the_state(pool):
    """Each process gets its own handle, pickled at spawn: they share slots and queue."""
    process = multiprocessing.get_context("spawn").Process(target=_acquire_in_child, args=(pool,))
    process.start()
    process.join(60)
    assert process.exitcode == 0
    (taken,) = [s for s, w in enumerate(pool.ledger.slot_owners.tolist()) if w == 1]
    assert sorted(_free(pool)) == sorted(set(range(SLOTS)) - {taken})


def test_a_dead_worker_s_unread_hand_overs_are_listed_with_their_count_and_readers(pool):
    """What the supervisor asks the learners about (`HandOverCheck`): slots the dead worker
    handed over that some reader has not copied; not another worker's, not read ones."""
    ledger = pool.ledger
    read, unread, others = (pool.acquire(worker=w) for w in (1, 1, 0))
    for slot, worker in ((read, 1), (unread, 1), (others, 0)):
        pool.hand_over(slot, readers=[0, 1], worker=worker)
    pool.copied(read, policy=0)
    pool.copied(read, policy=1)
    pool.copied(unread, policy=1)  # policy 1 got its message; policy 0 has not
    assert ledger.unread_hand_overs(1) == [(unread, 1, [0])]
    assert ledger.unread_hand_overs(0) == [(others, 1, [0, 1])]
    assert pool.release_copied([read]) == []
    while (again := pool.acquire(worker=1)) != read:  # the queue's order decides
        pass
    pool.hand_over(again, readers=[0], worker=1)  # the count tells this hand-over from the last
    assert (read, 2, [0]) in ledger.unread_hand_overs(1)


def test_a_slot_freed_with_its_reader_flags_set_is_no_longer_on_its_way():
    """A worker killed after setting the flags but before the hand-over: reclaim frees the
    slot, and it must stop counting as in flight to the learner."""
    ledger = SamplerLedger(num_workers=1, num_slots=SLOTS, num_policies=1)
    ledger.take(2, 0)
    ledger._np("slot_readers")[2, 0] = 1  # the first half of hand_over
    assert ledger.slots_in_flight(0) == 2  # being filled, and "to be read"
    ledger.release(2)
    assert ledger.slots_in_flight(0) == 0
