"""What the ranks decide together before each round of SGD.

Every learner of one policy meets the others at a round whenever it has data to train on, is
paused, or is stopping, and brings its row (`RankRow`). From the gathered table every rank
computes the same `RoundDecision`, so they all train the same number of SGD steps (the same
number of all-reduces: none is left waiting), stop together, and count the same env steps.

- Nobody trains while any rank is paused or stopping: a paused rank's runner has ended
  training (or not begun it), and a stopping one is about to leave the group.
- A stopping rank ends the rounds for all (`halt`); afterwards no rank meets again.
- A rank that has begun training and sees a peer finish (paused after training, or stopping)
  tells its runner (`peers_finished`): the run ends on every rank when it ends on one.
- What is trained: the fewest items (datasets, or replay batches) any rank has ready.
- DD-PPO's straggler rule (`sync_fraction` < 1, datasets only): a round of one dataset begins
  once that fraction of the ranks have one ready; every other rank takes part with weight 0
  (`follows`: it goes through the same SGD steps on its last dataset, so the collectives line
  up, and its gradients and statistics count for nothing), and keeps its new data, unfinished,
  for a later round. Ranks then meet at every poll, ready or not, so a straggler is never
  waited for. Until every rank has trained once, every rank waits for all.

Must not: talk to processes; `learner_group.py` gathers the rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Columns of a row, in the order they are gathered.
ROW_FIELDS = ("stopping", "finishing", "waiting", "ready_items", "new_env_steps", "can_follow")


@dataclass(frozen=True)
class RankRow:
    """One rank's state at a round."""

    stopping: bool  # its runner sent Stop
    finishing: bool  # paused after training had begun: its runner ended training
    waiting: bool  # paused before training began
    ready_items: int  # what it could train on now: datasets (0 or 1) or replay batches
    new_env_steps: int  # env steps it counted since the last round
    can_follow: bool = False  # it has a dataset to take part with, weight 0 (sync_fraction)

    def as_list(self) -> list[float]:
        return [float(getattr(self, name)) for name in ROW_FIELDS]

    @classmethod
    def from_list(cls, values: list[float]) -> "RankRow":
        stopping, finishing, waiting, ready, steps, can_follow = (int(v) for v in values)
        return cls(bool(stopping), bool(finishing), bool(waiting), ready, steps, bool(can_follow))


@dataclass(frozen=True)
class RoundDecision:
    """What every rank does after a round (the same on all)."""

    halt: bool  # some rank is stopping: no more rounds, no more training
    peers_finished: bool  # some rank finished or is stopping
    items: int  # datasets or batches every rank trains on (0: none this round)
    env_steps: int  # new env steps over all ranks
    follows: tuple[bool, ...] = ()  # per rank: takes part with weight 0 (sync_fraction)


def decide(rows: list[RankRow], sync_fraction: float = 1.0) -> RoundDecision:
    """The round's decision from every rank's row (rank order)."""
    halt = any(r.stopping for r in rows)
    finished = any(r.stopping or r.finishing for r in rows)
    env_steps = sum(r.new_env_steps for r in rows)
    if halt or any(r.finishing or r.waiting for r in rows):
        return RoundDecision(halt, finished, 0, env_steps)
    items = min(r.ready_items for r in rows)
    if items or sync_fraction >= 1.0:
        return RoundDecision(False, False, items, env_steps)
    ready = [r.ready_items > 0 for r in rows]
    enough = sum(ready) >= math.ceil(sync_fraction * len(rows) - 1e-9)
    if not enough or not all(r or row.can_follow for r, row in zip(ready, rows)):
        return RoundDecision(False, False, 0, env_steps)
    return RoundDecision(False, False, 1, env_steps, tuple(not r for r in ready))
