"""Which core each rollout worker process runs on (`worker_cpu_affinity`; paper, appendix).

With the setting on, rollout worker `w` pins itself to one core as it starts, and every
generation of `w` (the supervisor's replacements) gets the same core: a replacement lands where
its predecessor's caches were, and never on a core another worker holds. The cores are those the
runner may use (`os.sched_getaffinity`, so `taskset` or a container's cpuset is respected),
assigned round-robin; more workers than cores wrap around. The learner and inference workers
stay unpinned and float over every core the run may use: the scheduler puts them where the
workers leave room. Processes a worker starts (env helpers) inherit its core.

Linux only: macOS and Windows have no `sched_setaffinity`, and validation refuses the setting
there (`affinity_supported`).

Must not: know about components or configs; it maps indices to cores and pins this process.
"""

from __future__ import annotations

import os
from collections.abc import Collection


def affinity_supported() -> bool:
    """Whether this platform can pin a process to a core."""
    return hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")


def usable_cores() -> tuple[int, ...]:
    """The cores this process may run on, in ascending order (Linux only)."""
    return tuple(sorted(os.sched_getaffinity(0)))


def rollout_worker_core(worker: int, cores: Collection[int], first: int = 0) -> int:
    """The core of rollout worker `worker`, whatever its generation: round-robin over `cores`
    (in ascending order) from position `first`, wrapping around when workers outnumber cores.

    `first` shifts the whole assignment, so that several runs on one machine (the ranks of a
    data-parallel run on one node) start on different cores.
    """
    if worker < 0:
        raise ValueError(f"worker index must be >= 0, got {worker}")
    if not cores:
        raise ValueError("no cores to assign rollout workers to")
    ordered = sorted(cores)
    return ordered[(first + worker) % len(ordered)]


def pin_to_core(core: int) -> None:
    """Pin the calling process to `core`; processes it starts later inherit it."""
    os.sched_setaffinity(0, {core})
