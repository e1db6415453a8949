"""Run a function as the ranks of a data-parallel run on this machine (gloo on loopback),
without torchrun: what the distributed tests and benchmarks use to check collectives.

`run_ranks(fn, world_size, *args)` spawns `world_size` processes (fresh ones: a fork of a
process whose OpenMP pool has run can hang in torch); each gets a `TorchrunRank`
(rank 0 serves the store, as rank 0's runner does) and returns `fn(rank, *args)`, which must
be picklable. A rank that raises fails the call with its traceback; one that does not finish
within `timeout` seconds is killed and fails it too.
"""

from __future__ import annotations

import multiprocessing
import pickle
import socket
import traceback
from typing import Any, Callable

from sampleforge.distributed.torchrun_rank import TorchrunRank


def free_port() -> int:
    """A TCP port nobody listens on now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(
    fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 120.0
) -> list[Any]:
    """fn(rank, *args) on every rank, in a process of its own; the results in rank order."""
    port = free_port()
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_rank_main, args=(fn, r, world_size, port, args, results))
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    got: dict[int, Any] = {}
    try:
        for _ in procs:
            rank, ok, value = results.get(timeout=timeout)
            if not ok:
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            got[rank] = pickle.loads(value)
    finally:
        for p in procs:
            p.join(5.0)
            if p.is_alive():
                p.kill()
                p.join()
    return [got[r] for r in range(world_size)]


def _rank_main(fn, rank: int, world_size: int, port: int, args, results) -> None:
    info = TorchrunRank(rank, world_size, rank, "127.0.0.1", port, agent_store=False)
    try:
        store = info.open_store(60.0, serve=True) if rank == 0 else None
        value = fn(info, *args)
        # Plain pickle bytes: torch's queue pickler would share tensors by file descriptor,
        # which dies with this process.
        results.put((rank, True, pickle.dumps(value)))
        del store
    except BaseException:
        results.put((rank, False, traceback.format_exc()))
