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
   generation's requests instead of writing into a reclaimed slot). That includes a slot it
   had taken off the free queue without yet recording itself as its owner (killed between
   the two): `reclaim` counts the slots, see "Moving slots" below.
5. A rollout starts only while some trained policy's learner wants more slots on their way to
   it (`SamplerLedger.sampling_allowed`): the back-pressure that bounds policy lag.

The states live in `SamplerLedger`'s shared tensors (slot owners and readers) and the free
queue; only this class changes them. It never waits on a queue: a process killed while waiting
on a shared queue could leave it unusable for everyone.

Moving slots. Taking a slot off the free queue and recording its owner are two steps, and so
are marking a slot free and putting it on the queue. A process killed between the two steps of
an acquire would take a slot out of circulation for good. So every such move holds a shared
`flock` on the pool's lock file, and `reclaim` holds it exclusively: then no move is half done
by a live process, the kernel has dropped a dead one's lock, and a slot marked free that is not
on the queue was lost by the dead worker; `reclaim` puts it back. (An flock, unlike a
semaphore or a mutex in shared memory, dies with its holder and leaves nothing in /dev/shm.)

Must not: know about trajectories' contents, policies' samples or processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import weakref
from collections.abc import Iterator
from queue import Empty

from sampleforge.buffers.sampler_ledger import SamplerLedger
from sampleforge.comms.queues import make_queue, receive, send_many


class SlotPool:
    """Acquire, hand over, copy and reclaim trajectory slots; see the module docstring.

    Picklable: each process gets its own handle on the same shared ledger, queue and lock file.
    """

    def __init__(self, ledger: SamplerLedger, free_queue, lock_path: str) -> None:
        self.ledger = ledger
        self.free_queue = free_queue
        self.lock_path = lock_path
        self._lock_fd: tuple[int, int] | None = None  # (pid, fd): opened once per process
        self._remove_lock_file: weakref.finalize | None = None  # the creating handle's

    @classmethod
    def create(cls, ledger: SamplerLedger, free_queue=None) -> SlotPool:
        """A pool whose every slot is free, on a new queue; or on `free_queue`, where the
        caller puts the free slots itself. Its lock file is removed by `close`, or when this
        handle is collected or the process exits."""
        fd, lock_path = tempfile.mkstemp(prefix="sampleforge-slots-", suffix=".lock")
        os.close(fd)
        pool = cls(ledger, make_queue() if free_queue is None else free_queue, lock_path)
        pool._remove_lock_file = weakref.finalize(pool, _remove, lock_path)
        if free_queue is None:
            send_many(pool.free_queue, list(range(ledger.num_slots)))
        return pool

    def close(self) -> None:
        """The run is over: this process lets go of the lock file, and the creating handle
        removes it."""
        if self._lock_fd is not None and self._lock_fd[0] == os.getpid():
            os.close(self._lock_fd[1])
        self._lock_fd = None
        if self._remove_lock_file is not None:
            self._remove_lock_file()

    def __getstate__(self) -> dict:
        # Each process opens the lock file itself: an flock belongs to an open file, and one
        # shared with another process would not keep that process out.
        return {**self.__dict__, "_lock_fd": None, "_remove_lock_file": None}

    @contextlib.contextmanager
    def _moving(self, exclusive: bool = False) -> Iterator[None]:
        """Hold the lock file while a slot moves between the queue and the ledger."""
        fd = self._lock()
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _lock(self) -> int:
        if self._lock_fd is None or self._lock_fd[0] != os.getpid():
            self._lock_fd = (os.getpid(), os.open(self.lock_path, os.O_RDWR))
        return self._lock_fd[1]

    @property
    def num_slots(self) -> int:
        return self.ledger.num_slots

    # --- rollout workers ------------------------------------------------------------------------
    def acquire(self, worker: int) -> int | None:
        """A free slot for `worker` to fill, or None: the learners have enough on its way, or
        no slot is free right now (never waits)."""
        if not self.ledger.sampling_allowed():
            return None
        with self._moving():
            try:
                slot = self.free_queue.get(block=False)
            except Empty:
                return None
            self.ledger.take(slot, worker)
        return slot

    def hand_over(self, slot: int, readers: list[int]) -> None:
        """`slot` is complete: the learners of `readers` will copy it. Call before telling
        them. With no reader (only frozen opponents acted) it is free again at once."""
        if not readers:
            self._give_back([slot])
        else:
            self.ledger.hand_over(slot, readers)

    # --- learners -------------------------------------------------------------------------------
    def copied(self, slot: int, policy: int) -> None:
        """`policy`'s learner has copied its rows of `slot`."""
        self.ledger.reader_done(slot, policy)

    def release_copied(self, slots: list[int]) -> list[int]:
        """Give back those of `slots` (slots this learner returns) that every reader has
        copied by now; returns the ones still being read by another policy's learner."""
        done = [slot for slot in slots if self.ledger.all_read(slot)]
        if done:
            self._give_back(done)
        return [slot for slot in slots if slot not in done]

    def _give_back(self, slots: list[int]) -> None:
        with self._moving():
            for slot in slots:
                self.ledger.release(slot)
            send_many(self.free_queue, slots)

    # --- supervisor -----------------------------------------------------------------------------
    def reclaim(self, worker: int) -> list[int]:
        """Free the slots a dead worker was filling (its partial rollouts never reach a
        learner), and any slot it had taken off the free queue without recording it; returns
        them. Call once the worker is dead."""
        with self._moving(exclusive=True):
            slots = self.ledger.slots_of(worker)
            for slot in slots:
                self.ledger.release(slot)
            queued = receive(self.free_queue, 0.0)
            lost = sorted(set(self.ledger.free_slots()) - set(queued) - set(slots))
            send_many(self.free_queue, queued + slots + lost)
        return slots + lost


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
