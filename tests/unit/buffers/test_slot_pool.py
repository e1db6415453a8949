"""SlotPool: each invariant of its module docstring, one test each (numbered as there)."""

import multiprocessing

import pytest

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
