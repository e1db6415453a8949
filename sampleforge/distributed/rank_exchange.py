"""Episodes a rank's workers finished, sent to rank 0's runner through the run's TCPStore.

Rank 0 alone logs and judges `stop_at_mean_return`, so its statistics must count every rank's
episodes. A rank r > 0 writes each batch (`EpisodesFinished`, pickled: a few hundred bytes a
second, base64 for the store's string values) under its own key `r/<n>` and then counts it in `r/sent`; rank 0 reads the batches it
has not seen yet, in order, and deletes them, so the store never grows.

Must not: carry anything on the training path (the learners' collectives do that).
"""

from __future__ import annotations

import base64
import pickle

import torch.distributed as dist

from sampleforge.comms.messages import EpisodesFinished
from sampleforge.distributed.torchrun_rank import TorchrunRank


class EpisodeExchange:
    """One runner's end of the exchange; see the module docstring."""

    def __init__(self, store: dist.Store, rank: TorchrunRank) -> None:
        self._store = dist.PrefixStore(f"{rank.store_prefix}episodes/", store)
        self.rank, self.world_size = rank.rank, rank.world_size
        self._sent = 0
        self._taken = [0] * rank.world_size  # rank 0: batches taken in from each rank

    def send(self, msg: EpisodesFinished) -> None:
        """Hand a batch to rank 0 (rank 0's own are already there: nothing to do)."""
        if self.rank == 0:
            return
        self._store.set(f"{self.rank}/{self._sent}", base64.b64encode(pickle.dumps(msg)).decode())
        self._sent += 1
        self._store.add(f"{self.rank}/sent", 1)

    def receive(self) -> list[EpisodesFinished]:
        """Rank 0: the batches the other ranks sent since the last call, rank by rank (other
        ranks receive nothing)."""
        batches: list[EpisodesFinished] = []
        if self.rank != 0:
            return batches
        for rank in range(1, self.world_size):
            sent = self._store.add(f"{rank}/sent", 0)
            for n in range(self._taken[rank], sent):
                key = f"{rank}/{n}"
                batches.append(pickle.loads(base64.b64decode(self._store.get(key))))
                self._store.delete_key(key)
            self._taken[rank] = sent
        return batches
