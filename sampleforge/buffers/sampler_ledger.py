"""Shared bookkeeping of trajectory slots and rollout workers, read by learners and the supervisor.

- `slot_owners[slot]`: the rollout worker filling that slot; `HANDED_OVER` (-2) once that
  worker has handed it to the learners; `FREE` (-1) from when it is given back to the free
  queue until a worker takes it. The slots of a worker that died can so be given back, and its
  partial trajectories never reach a learner.
- `slot_readers[slot, policy]`: 1 while that policy's learner still has to copy its rows of a
  finished slot (several policies may have acted in one slot). Each learner clears only its own
  entry; the slot's designated returner (the reader with the lowest policy id) gives the slot
  back to the free list once the row is all zeros, so a slot is returned exactly once.
- `handed_over_by[slot]`, `hand_overs[slot]`: the worker that last handed the slot over, and
  how many times it has been handed over. A worker killed between its hand-over here and its
  `TrajectoryReady` messages leaves a slot whose readers wait for a message that never comes;
  these let the supervisor ask those readers about exactly that hand-over
  (`unread_hand_overs`, `HandOverCheck`).
- `generations[worker]`: bumped by the runner when it replaces a worker. Requests carry the
  generation of the worker that sent them; inference workers drop requests of dead generations
  instead of writing into slots that may already belong to someone else.
- `heartbeats[worker]`: wall time (time.time()) of the worker's last sign of progress; a worker
  whose envs hang stops updating it.
- `sampling_slots[policy]`: written by that policy's learner, read by rollout workers before they
  start a rollout: how many slots may be on their way to that learner (being filled, or
  finished and not yet copied). A worker starts a rollout only while some trained policy has
  fewer slots on their way than that. Each worker sees its own `take` at once, so one worker
  never overshoots; several workers deciding at the same instant overshoot by at most one slot
  each. This back-pressure is what bounds policy lag when the learner is the slow part.

Plain tensors in shared memory, each entry with a single writer at any time, so no locks (a
named semaphore would also outlive a killed run in /dev/shm). `SlotPool` adds one file lock
around the moves between the free queue and `slot_owners`, so that a slot a killed worker
was moving can be found.
"""

from __future__ import annotations

import time

import torch

FREE = -1
HANDED_OVER = -2
NO_WORKER = -1  # `handed_over_by` of a slot never handed over, or by a caller that did not say


class SamplerLedger:
    """Slot ownership and readers, worker generations and heartbeats in shared memory."""

    def __init__(self, num_workers: int, num_slots: int, num_policies: int = 1):
        self.slot_owners = torch.full((num_slots,), FREE, dtype=torch.int64).share_memory_()
        self.slot_readers = torch.zeros(num_slots, num_policies, dtype=torch.int8).share_memory_()
        self.handed_over_by = torch.full((num_slots,), NO_WORKER, dtype=torch.int64)
        self.handed_over_by.share_memory_()
        self.hand_overs = torch.zeros(num_slots, dtype=torch.int64).share_memory_()
        self.generations = torch.zeros(num_workers, dtype=torch.int64).share_memory_()
        self.heartbeats = torch.zeros(num_workers, dtype=torch.float64).share_memory_()
        # Until the learners first say otherwise, every slot may be filled.
        self.sampling_slots = torch.full(
            (num_policies,), num_slots, dtype=torch.int32
        ).share_memory_()
        self._views: dict[str, object] | None = None

    def _np(self, name: str):
        """A numpy view of a shared tensor: writes through it are ~100x cheaper than tensor
        item assignments, which matters on the hot path and keeps the moments when a killed
        rollout worker could lose a slot (between two bookkeeping steps) to well under a
        microsecond."""
        if self._views is None:
            self._views = {
                key: getattr(self, key).numpy()
                for key in (
                    "slot_owners",
                    "slot_readers",
                    "handed_over_by",
                    "hand_overs",
                    "heartbeats",
                    "sampling_slots",
                )
            }
        return self._views[name]

    def beat(self, worker: int) -> None:
        """Called on every rollout-worker poll."""
        self._np("heartbeats")[worker] = time.time()

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_views": None}  # views are rebuilt in each process

    def seconds_since_beat(self, worker: int) -> float:
        last = float(self.heartbeats[worker])
        return time.time() - last if last > 0 else 0.0

    # --- slots ----------------------------------------------------------------------------------
    def slots_of(self, worker: int) -> list[int]:
        """Slots currently being filled by `worker`."""
        return (self.slot_owners == worker).nonzero().flatten().tolist()

    def take(self, slot: int, worker: int) -> None:
        self._np("slot_owners")[slot] = worker

    def release(self, slot: int) -> None:
        # A slot freed with reader flags still set (its worker died between setting them and
        # handing it over: no message went out) would count as on its way until reused.
        self._np("slot_readers")[slot] = 0
        self._np("slot_owners")[slot] = FREE

    def free_slots(self) -> list[int]:
        """Slots on the free queue, or on their way there or off it."""
        return (self.slot_owners == FREE).nonzero().flatten().tolist()

    def hand_over(self, slot: int, readers: list[int], worker: int = NO_WORKER) -> None:
        """`worker` finished `slot`: the learners of `readers` will copy from it. Called before
        any of them is told, so no flag is read before it is set."""
        flags = self._np("slot_readers")
        flags[slot] = 0
        flags[slot, readers] = 1
        self._np("handed_over_by")[slot] = worker
        self._np("hand_overs")[slot] += 1
        self._np("slot_owners")[slot] = HANDED_OVER

    def unread_hand_overs(self, worker: int) -> list[tuple[int, int, list[int]]]:
        """(slot, hand-over count, policies yet to copy it) for each slot `worker` handed over
        that some learner has not copied yet (call once the worker is dead)."""
        owners, by = self._np("slot_owners"), self._np("handed_over_by")
        flags, counts = self._np("slot_readers"), self._np("hand_overs")
        slots = ((owners == HANDED_OVER) & (by == worker)).nonzero()[0]
        return [
            (int(s), int(counts[s]), flags[s].nonzero()[0].tolist())
            for s in slots
            if flags[s].any()
        ]

    def reader_done(self, slot: int, policy: int) -> None:
        """`policy`'s learner copied its rows of `slot`."""
        self._np("slot_readers")[slot, policy] = 0

    def all_read(self, slot: int) -> bool:
        """Every learner has copied its rows of `slot`."""
        return not self._np("slot_readers")[slot].any()

    @property
    def num_slots(self) -> int:
        return self.slot_owners.shape[0]

    def slots_being_filled(self) -> int:
        """Slots some rollout worker is filling now."""
        return int((self._np("slot_owners") >= 0).sum())

    def slots_in_flight(self, policy: int) -> int:
        """Slots being filled by any worker, plus finished ones `policy`'s learner has not
        copied yet: what is on its way to that learner."""
        return self.slots_being_filled() + int(self._np("slot_readers")[:, policy].sum())

    # --- back-pressure --------------------------------------------------------------------------
    def set_sampling_slots(self, policy: int, slots: int) -> None:
        """`policy`'s learner wants at most `slots` slots on their way to it."""
        self._np("sampling_slots")[policy] = slots

    def sampling_allowed(self) -> bool:
        """Some trained policy's learner wants more slots on their way than it has."""
        budget = self._np("sampling_slots")
        return any(self.slots_in_flight(p) < budget[p] for p in range(len(budget)))

    # --- workers --------------------------------------------------------------------------------
    def retire(self, worker: int) -> int:
        """Mark the current generation of `worker` dead; returns the new generation."""
        self.generations[worker] += 1
        self.heartbeats[worker] = 0.0
        return int(self.generations[worker])
