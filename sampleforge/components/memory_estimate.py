"""Refusing a run whose buffers cannot fit in memory, before any of them is allocated.

A run's big tensors are few and their sizes follow from the settings and the observation
space:

- the shared trajectory buffer (`buffers/trajectory_buffer.py`): `num_slots x (T + 1) x rows`
  steps of observations, actions, recurrent state and per-step scalars, in host shared memory
  (torch places it in /dev/shm);
- each learner's staging (its family's, `learners/registry.py: staging_estimate`): for an
  on-policy learner a dataset's trajectories plus one slot's rows, its per-step copy with
  single-sample minibatches and the minibatch; for a value-based one its replay, full;
- the published weights (`buffers/shared_weights.py`): two flat copies per trained policy and
  one per frozen snapshot.

Activations of the forward and backward passes are not counted, so the estimate is a lower
bound. It is compared with the memory the kernel says is available (`MemAvailable`), with the
free space of /dev/shm for the shared part, and, for a CUDA learner, with the device's free
memory; a run that cannot fit is a `ConfigError` naming the settings that size it, instead of
an allocator error (or a SIGBUS from a full /dev/shm) once processes are starting.

Must not: allocate the tensors it estimates.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from sampleforge.buffers.trajectory_buffer import TrajectoryLayout
from sampleforge.config import Config, ConfigError
from sampleforge.learners.registry import staging_estimate

SHARED_MEMORY_DIR = "/dev/shm"


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes of a run's big tensors (see the module docstring)."""

    sampling_slots: int  # the trajectory buffer's slots that the rollout workers fill
    dataset_slots: int  # the slots that hold trajectories while the learners catch up
    learner_datasets: int  # all learners together: staging, sample copies, minibatches
    weights: int  # every published copy of the policy weights
    learner_on_host: bool  # else on the CUDA device

    @property
    def trajectory_buffer(self) -> int:
        return self.sampling_slots + self.dataset_slots

    @property
    def shared(self) -> int:
        """Host shared memory (/dev/shm)."""
        return self.trajectory_buffer + (self.weights if self.learner_on_host else 0)

    @property
    def host(self) -> int:
        return self.shared + (self.learner_datasets if self.learner_on_host else 0)

    @property
    def device(self) -> int:
        """Bytes on the CUDA device (0 for a CPU run)."""
        return 0 if self.learner_on_host else self.learner_datasets + self.weights


def estimate_memory(
    cfg: Config, layout: TrajectoryLayout, weight_numel: tuple[int, int], device: torch.device
) -> MemoryEstimate:
    """The bytes of a run of `cfg` whose trajectory buffer has `layout`, whose model has
    `weight_numel` (floating, other) elements, learning on `device`."""
    slot = (layout.rollout + 1) * layout.rows_per_slot * layout.step_bytes()
    sampling = 2 * cfg.num_workers * cfg.worker_num_splits  # slots_needed's first term
    copies = 2 * cfg.num_policies + cfg.num_frozen_opponents  # published + incoming per policy
    return MemoryEstimate(
        sampling_slots=min(sampling, layout.num_slots) * slot,
        dataset_slots=max(layout.num_slots - sampling, 0) * slot,
        learner_datasets=cfg.num_policies * staging_estimate(cfg, layout).nbytes,
        weights=copies * (4 * weight_numel[0] + 8 * weight_numel[1]),
        learner_on_host=device.type != "cuda",
    )


def available_host_memory() -> int | None:
    """Bytes the kernel says can be allocated without swapping (MemAvailable), else the free
    physical pages; None when neither can be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def free_shared_memory() -> int | None:
    """Free bytes of /dev/shm, where torch's shared tensors live (None where there is none)."""
    try:
        stats = os.statvfs(SHARED_MEMORY_DIR)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def free_device_memory(device: torch.device) -> int | None:
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return int(torch.cuda.mem_get_info(device)[0])


def memory_problems(cfg: Config, estimate: MemoryEstimate, device: torch.device) -> list[str]:
    """A line naming each memory the run cannot fit in, and the settings that size it."""
    limits = [
        ("host memory", estimate.host, available_host_memory(), "available"),
        (f"shared memory in {SHARED_MEMORY_DIR}", estimate.shared, free_shared_memory(), "free"),
        (f"{device} memory", estimate.device, free_device_memory(device), "free"),
    ]
    short = [
        f"{_size(needed)} of {what} ({_size(limit)} {state})"
        for what, needed, limit, state in limits
        if needed and limit is not None and needed > limit
    ]
    if not short:
        return []
    return [f"the run needs at least {' and '.join(short)}: {_breakdown(cfg, estimate)}"]


def check_memory(
    cfg: Config, layout: TrajectoryLayout, weight_numel: tuple[int, int], device: torch.device
) -> MemoryEstimate:
    """The estimate, or ConfigError if the run cannot fit in this machine's memory."""
    estimate = estimate_memory(cfg, layout, weight_numel, device)
    problems = memory_problems(cfg, estimate, device)
    if problems:
        raise ConfigError(problems)
    return estimate


def _breakdown(cfg: Config, e: MemoryEstimate) -> str:
    """Which settings size which part, and what to lower: the larger part's settings."""
    datasets = e.dataset_slots + e.learner_datasets
    policies = "policy" if cfg.num_policies == 1 else "policies"
    staging = staging_estimate(cfg, None)
    dataset_part = f"{staging.sized_by} for {cfg.num_policies} {policies} take {_size(datasets)}"
    sampling_part = (
        f"sampling slots of num_workers {cfg.num_workers} x num_envs_per_worker "
        f"{cfg.num_envs_per_worker} x rollout {cfg.rollout} take {_size(e.sampling_slots)}"
    )
    if datasets >= e.sampling_slots:
        return f"{dataset_part}, {sampling_part}; lower {staging.to_lower}"
    return f"{sampling_part}, {dataset_part}; lower num_workers, num_envs_per_worker or rollout"


def _size(nbytes: int | float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{math.ceil(nbytes / 1e3):.0f} kB"
