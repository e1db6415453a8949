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
lock on the pool's lock file, and `reclaim` holds it exclusively: then no move is half done by
a live process, the kernel has dropped a dead one's lock, and a slot marked free that is not on
the queue was lost by the dead worker; `reclaim` puts it back. The lock is a POSIX record lock
(`fcntl.lockf`): it dies with its holder, it belongs to a process (so each process holds its
own through a descriptor it inherited), and the file is unlinked as soon as it is made, so
nothing is left behind however the run ends.

Must not: know about trajectories' contents, policies' samples or processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import tempfile
import time
import weakref
from collections.abc import Iterator
from multiprocessing.reduction import DupFd
from queue import Empty

from sampleforge.buffers.sampler_ledger import NO_WORKER, SamplerLedger
from sampleforge.comms.queues import make_queue, receive, send_many

log = logging.getLogger(__name__)

# How long `reclaim` waits for moves in progress. They take microseconds; a live process
# holding the lock longer is itself stuck, and reclaim must not hang the supervisor with it.
RECLAIM_LOCK_TIMEOUT_SEC = 2.0


class SlotPool:
    """Acquire, hand over, copy and reclaim trajectory slots; see the module docstring.

    Picklable: each process gets its own handle on the same shared ledger, queue and lock file.
    """

    def __init__(self, ledger: SamplerLedger, free_queue, lock_fd: int) -> None:
        self.ledger = ledger
        self.free_queue = free_queue
        self._own(lock_fd)

    def _own(self, lock_fd: int) -> None:
        """Hold `lock_fd`, this process's descriptor of the (unlinked) lock file, and close it
        with `close` or, when a handle is dropped without it (tests and the Python API make
        many pools), when the handle is collected."""
        self._lock_fd = lock_fd
        self._closer = weakref.finalize(self, os.close, lock_fd)

    @classmethod
    def create(cls, ledger: SamplerLedger, free_queue=None) -> SlotPool:
        """A pool whose every slot is free, on a new queue; or on `free_queue`, where the
        caller puts the free slots itself."""
        lock_fd, path = tempfile.mkstemp(prefix="sampleforge-slots-", suffix=".lock")
        os.unlink(path)  # only descriptors name it from now on
        pool = cls(ledger, make_queue() if free_queue is None else free_queue, lock_fd)
        if free_queue is None:
            send_many(pool.free_queue, list(range(ledger.num_slots)))
        return pool

    def close(self) -> None:
        """This process is done with the pool: close its descriptor of the lock file."""
        self._closer()  # a finalizer runs once: a second close does nothing
        self._lock_fd = -1

    def __getstate__(self) -> dict:
        # The receiving process gets a descriptor of its own (multiprocessing passes it along).
        state = {**self.__dict__, "_lock_fd": DupFd(self._lock_fd)}
        del state["_closer"]
        return state

    def __setstate__(self, state: dict) -> None:
        lock_fd = state.pop("_lock_fd").detach()
        self.__dict__.update(state)
        self._own(lock_fd)

    @contextlib.contextmanager
    def _moving(self) -> Iterator[None]:
        """Hold the lock (shared) while a slot moves between the queue and the ledger."""
        fcntl.lockf(self._lock_fd, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.lockf(self._lock_fd, fcntl.LOCK_UN)

    def _lock_exclusively(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.lockf(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except OSError:  # EAGAIN or EACCES: a move is in progress
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.001)

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

    def hand_over(self, slot: int, readers: list[int], worker: int = NO_WORKER) -> None:
        """`slot`, filled by `worker`, is complete: the learners of `readers` will copy it.
        Call before telling them. With no reader (only frozen opponents acted) it is free
        again at once."""
        if not readers:
            self._give_back([slot])
        else:
            self.ledger.hand_over(slot, readers, worker)

    # --- learners -------------------------------------------------------------------------------
    def copied(self, slot: int, policy: int) -> None:
        """`policy`'s learner has copied its rows of `slot`."""
        self.ledger.reader_done(slot, policy)

    def done_with(
        self, slot: int, policy: int, returns_slot: bool, to_return: list[int]
    ) -> list[int]:
        """`policy`'s learner is done with `slot` (copied it, or let it go unstaged); if it
        returns the slot, it joins `to_return`. Gives back those of `to_return` every reader
        is done with; returns the rest."""
        self.copied(slot, policy)
        if returns_slot:
            to_return = [*to_return, slot]
        return self.release_copied(to_return)

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
        slots = self.ledger.slots_of(worker)
        if not self._lock_exclusively(RECLAIM_LOCK_TIMEOUT_SEC):
            log.warning(
                "a slot move has held the slot lock for over %.0f s: reclaimed only the "
                "slots rollout worker %d recorded as its own",
                RECLAIM_LOCK_TIMEOUT_SEC,
                worker,
            )
            self._give_back(slots)
            return slots
        try:
            for slot in slots:
                self.ledger.release(slot)
            queued = receive(self.free_queue, 0.0)
            lost = sorted(set(self.ledger.free_slots()) - set(queued) - set(slots))
            send_many(self.free_queue, queued + slots + lost)
        finally:
            fcntl.lockf(self._lock_fd, fcntl.LOCK_UN)
        return slots + lost
