"""Which rank of a data-parallel run this process is: read from torchrun's environment.

torchrun (single node, or multi-node with c10d rendezvous) starts one `sampleforge train` per
rank and sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; the last two name the
TCPStore every process of the run meets at. With TORCHELASTIC_USE_AGENT_STORE the launcher's
agent already serves that store; otherwise rank 0 serves it (`open_store`).

Must not: start processes or train.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

from sampleforge.config import Config

log = logging.getLogger(__name__)

_REQUIRED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

# Seeds of ranks > 0: the run's seed plus this times the rank (distinct, and far from the
# per-policy and per-worker offsets of config/ranges.py).
RANK_SEED_STRIDE = 1_000_003


class NotLaunchedByTorchrun(RuntimeError):
    """`--distributed true` without torchrun's environment."""


@dataclass(frozen=True)
class TorchrunRank:
    """This process's place in the run (picklable: learner processes receive it)."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    agent_store: bool  # the launcher's agent serves the store (nobody of ours hosts it)
    restart: int = 0  # torchrun's restarts of the job so far (--max-restarts)
    run_id: str = ""  # torchrun's id of the job (--rdzv-id; a fresh one with --standalone)

    @property
    def store_prefix(self) -> str:
        """Where this attempt's keys live in the store: the agent's store outlives a restart,
        and a restarted job must not read the keys of the attempt before."""
        return f"sampleforge/attempt{self.restart}/"

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that logs, evaluates and checkpoints."""
        return self.rank == 0

    def seed(self, seed: int | None) -> int | None:
        """This rank's seed, from the run's (None stays None: random)."""
        return None if seed is None else seed + self.rank * RANK_SEED_STRIDE

    def open_store(self, timeout_sec: float, *, serve: bool) -> dist.TCPStore:
        """The run's TCPStore: served by this process when `serve` (rank 0's runner, unless
        the agent serves it), else a client of it (waits up to `timeout_sec` for it)."""
        return dist.TCPStore(
            self.master_addr,
            self.master_port,
            is_master=serve and self.is_main and not self.agent_store,
            timeout=timedelta(seconds=timeout_sec),
            wait_for_workers=False,
        )


def torchrun_rank(environ: dict[str, str] | None = None) -> TorchrunRank:
    """This process's rank; NotLaunchedByTorchrun naming what is missing."""
    env = os.environ if environ is None else environ
    missing = [name for name in _REQUIRED if name not in env]
    if missing:
        raise NotLaunchedByTorchrun(
            f"--distributed true needs torchrun's environment ({', '.join(missing)} not set): "
            "launch with `torchrun --nproc-per-node N -m sampleforge train ... --distributed "
            "true` (docs/distributed.md)"
        )
    return TorchrunRank(
        rank=int(env["RANK"]),
        world_size=int(env["WORLD_SIZE"]),
        local_rank=int(env["LOCAL_RANK"]),
        master_addr=env["MASTER_ADDR"],
        master_port=int(env["MASTER_PORT"]),
        agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
        restart=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
        run_id=env.get("TORCHELASTIC_RUN_ID", ""),
    )


def scratch_dir(rank: TorchrunRank) -> str:
    """A rank > 0's private train_dir, empty: named by the job and rank, so a restarted rank
    first removes what its killed predecessor left (without a job id: a fresh name)."""
    if not rank.run_id:
        return tempfile.mkdtemp(prefix=f"sampleforge_rank{rank.rank}_")
    job = rank.run_id
    if job == "none":  # torchrun's id under a static rendezvous: every such job has it
        job = f"{job}_{rank.master_addr}_{rank.master_port}"
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in job)
    path = Path(tempfile.gettempdir()) / f"sampleforge_rank{rank.rank}_{safe}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return str(path)


def rank_config(cfg: Config, rank: TorchrunRank, scratch_dir: str) -> Config:
    """`cfg` as this rank runs it: its own seed; after a torchrun restart, rank 0 resumes the
    experiment rather than overwrite it again; a rank other than 0 keeps its files in
    `scratch_dir` (deleted at close: only rank 0 writes to the experiment), neither evaluates
    nor judges the return (rank 0 does, and the others end with it)."""
    changes: dict = {"seed": rank.seed(cfg.seed)}
    if rank.is_main and rank.restart > 0 and cfg.restart_behavior == "overwrite":
        # torchrun restarts a job with its first command line: overwriting again would
        # delete what the attempts before this one trained.
        log.warning(
            "torchrun restart %d: resuming the experiment, not overwriting it as its "
            "first attempt did (--restart_behavior overwrite)",
            rank.restart,
        )
        changes["restart_behavior"] = "resume"
    if not rank.is_main:
        changes.update(
            train_dir=scratch_dir,
            eval_every_env_steps=None,
            stop_on="training",
            stop_at_mean_return=math.inf,
            restart_behavior="overwrite",
        )
    return dataclasses.replace(cfg, **changes)
