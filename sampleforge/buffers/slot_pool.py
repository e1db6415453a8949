"""SlotPool: the one owner of the trajectory-slot protocol.

A slot of the shared trajectory buffer is always in exactly one of three states:

    free ──acquire(worker)──> filling ──hand_over(slot, readers)──> handed over
      ^                          │                                      │
      └──────reclaim(worker)─────┘     └──copied(slot, policy) by each reader; the returner
                                          gives it back once all have (release_copied)

Invariants (tests/unit/buffers/test_slot_pool.py checks each):

1. A free slot is in the free queue exactly once; a slot being filled or handed over is not
   in it.
2. Only the worker that acquired a slot writes into it, until it hands the slot over; after
   that nobody writes into it until it is free again.
3. A handed-over slot goes back to the free queue exactly once: by its returner (the reader
   with the lowest policy id; the `TrajectoryReady` of that reader says `returns_slot`) after
   every reader has copied its rows, or at once if no trained policy acted in it.
4. The slots a dead rollout worker was filling go back with `reclaim`, which the supervisor
   calls after it has retired the worker's generation (inference then drops the dead
   generation's requests instead of writing into a reclaimed slot).
5. A rollout starts only while some trained policy's learner wants more slots on their way to
   it (`SamplerLedger.sampling_allowed`): the back-pressure that bounds policy lag.

The states live in `SamplerLedger`'s shared tensors (slot owners and readers) and the free
queue; only this class changes them. It never blocks: a process killed while waiting on a
shared queue could leave it unusable for everyone.

Must not: know about trajectories' contents, policies' samples or processes.
"""

from __future__ import annotations

from queue import Empty

from sampleforge.buffers.sampler_ledger import SamplerLedger
from sampleforge.comms.queues import make_queue, send_many


class SlotPool:
    """Acquire, hand over, copy and reclaim trajectory slots; see the module docstring.

    Picklable: each process gets its own handle on the same shared ledger and queue."""

    def __init__(self, ledger: SamplerLedger, free_queue) -> None:
        self.ledger = ledger
        self.free_queue = free_queue

    @classmethod
    def create(cls, ledger: SamplerLedger) -> SlotPool:
        """A pool whose every slot is free."""
        pool = cls(ledger, make_queue())
        send_many(pool.free_queue, list(range(ledger.num_slots)))
        return pool

    @property
    def num_slots(self) -> int:
        return self.ledger.num_slots

    # --- rollout workers ------------------------------------------------------------------------
    def acquire(self, worker: int) -> int | None:
        """A free slot for `worker` to fill, or None: the learners have enough on its way, or
        no slot is free right now (never waits)."""
        if not self.ledger.sampling_allowed():
            return None
        try:
            slot = self.free_queue.get(block=False)
        except Empty:
            return None
        self.ledger.take(slot, worker)
        return slot

    def hand_over(self, slot: int, readers: list[int]) -> None:
        """`slot` is complete: the learners of `readers` will copy it. Call before telling
        them. With no reader (only frozen opponents acted) it is free again at once."""
        self.ledger.hand_over(slot, readers)
        if not readers:
            send_many(self.free_queue, [slot])

    # --- learners -------------------------------------------------------------------------------
    def copied(self, slot: int, policy: int) -> None:
        """`policy`'s learner has copied its rows of `slot`."""
        self.ledger.reader_done(slot, policy)

    def release_copied(self, slots: list[int]) -> list[int]:
        """Give back those of `slots` (slots this learner returns) that every reader has
        copied by now; returns the ones still being read by another policy's learner."""
        done = [slot for slot in slots if self.ledger.all_read(slot)]
        if done:
            send_many(self.free_queue, done)
        return [slot for slot in slots if slot not in done]

    # --- supervisor -----------------------------------------------------------------------------
    def reclaim(self, worker: int) -> list[int]:
        """Free the slots a dead worker was filling (its partial rollouts never reach a
        learner); returns them."""
        slots = self.ledger.slots_of(worker)
        for slot in slots:
            self.ledger.release(slot)
        send_many(self.free_queue, slots)
        return slots
