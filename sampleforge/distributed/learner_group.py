"""One policy's learners across the ranks of a data-parallel run: a torch.distributed group.

Every rank's learner worker of policy p joins the group "learner_p<p>" at the run's TCPStore
(a `PrefixStore` per policy, so a multi-policy run has one independent group per policy and no
collective of one can wait on another's). Gradients travel on the device's backend (gloo on
CPU, NCCL on CUDA); the round table and the start-up state on gloo, on the CPU.

What it gives the learner (see docs/distributed.md for why each keeps the ranks identical):
- `average_gradients`: between backward and clipping, every parameter's gradient averaged over
  the ranks in one flat all-reduce (a parameter without a gradient counts as zeros, so every
  rank reduces the same tensor whatever its loss touched); a rank's non-finite loss poisons the
  average, so all skip that step together;
- `all_true`: a flag agreed by all (a batch every rank can train on);
- `merge_moments`: the running observation and return statistics updated with the moments of
  the whole round's data, as one process would from the concatenated batch;
- `broadcast_state`: rank 0's training state (resumed or fresh) to all at start;
- `gather`: the round table (`rounds.py`).

Must not: decide when to train or stop (the learner worker and `rounds.py` do).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from sampleforge.distributed.rounds import RankRow
from sampleforge.distributed.torchrun_rank import TorchrunRank
from sampleforge.models.normalizer import RunningMeanStd


class PeerLostError(RuntimeError):
    """Another rank's learner left, or did not answer in time: the run cannot go on."""


@contextlib.contextmanager
def peer_errors(policy_id: int) -> Iterator[None]:
    """Turn torch.distributed's failure at a collective (a peer gone: connection closed, or
    no answer within distributed_timeout_sec) into PeerLostError, one line that says so."""
    try:
        yield
    except RuntimeError as e:
        # gloo reports a peer gone as a plain RuntimeError from its transport.
        text = str(e).strip()
        if not (isinstance(e, dist.DistError) or "gloo" in text or "NCCL" in text):
            raise
        first = text.splitlines()[0].split("] ", 1)[-1] if text else type(e).__name__
        raise PeerLostError(
            f"another rank's learner of policy {policy_id} left the run or stopped answering "
            f"({first[:200]}); this rank stops too"
        ) from None


class LearnerGroup:
    """This rank's member of policy `policy_id`'s learner group; see the module docstring."""

    def __init__(
        self, rank: TorchrunRank, policy_id: int, device: torch.device, timeout_sec: float
    ) -> None:
        self.rank, self.world_size = rank.rank, rank.world_size
        self.device = device
        store = dist.PrefixStore(
            f"{rank.store_prefix}learner_p{policy_id}/", rank.open_store(timeout_sec, serve=False)
        )
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(
            backend,
            store=store,
            rank=rank.rank,
            world_size=rank.world_size,
            timeout=timedelta(seconds=timeout_sec),
            device_id=device if device.type == "cuda" else None,
        )
        # The round table and pickled state go over gloo on the CPU whatever the device.
        self._control = dist.new_group(backend="gloo") if backend != "gloo" else None
        # Seconds in gradient all-reduces (waiting for the slowest rank included), over the run.
        self.allreduce_seconds = 0.0
        # 1: this rank's data counts; 0: it only takes part (a straggler, `rounds.py`).
        self.weight = 1.0

    # --- gradients ------------------------------------------------------------------------------
    @torch.no_grad()
    def average_gradients(self, params: Iterable[nn.Parameter], local_ok: bool) -> bool:
        """Average every parameter's gradient over the ranks that count (in place, weighted by
        `weight`; a missing gradient is zeros); returns whether every rank's loss was finite
        (`local_ok` on all)."""
        started = time.perf_counter()
        params = [p for p in params if p.requires_grad]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        # The last two entries: the weights' sum, and 0 from a rank whose loss was finite, NaN
        # from one whose was not.
        w = self.weight
        flags = torch.tensor([w, 0.0 if local_ok else math.nan], device=self.device)
        flat = torch.cat([(g if w == 1.0 else g * w).reshape(-1).float() for g in grads] + [flags])
        dist.all_reduce(flat)
        flat[:-2].div_(flat[-2])
        offset = 0
        for p, g in zip(params, grads):
            n = g.numel()
            p.grad = flat[offset : offset + n].view_as(p).to(p.dtype)
            offset += n
        all_ok = bool(torch.isfinite(flat[-1]))  # waits for the reduction on any device
        self.allreduce_seconds += time.perf_counter() - started
        return all_ok

    def total(self, value: int) -> int:
        """The sum of `value` over the ranks."""
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, group=self._control)
        return int(t.item())

    def all_true(self, flag: bool) -> bool:
        """Whether `flag` holds on every rank."""
        t = torch.tensor([int(flag)], dtype=torch.int32)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self._control)
        return bool(t.item())

    # --- running statistics ---------------------------------------------------------------------
    def share_running_statistics(self, model: nn.Module) -> None:
        """Every running normaliser in `model` merges the moments of all ranks' batches."""
        for module in model.modules():
            if isinstance(module, RunningMeanStd):
                module.moment_reducer = self.merge_moments

    @torch.no_grad()
    def merge_moments(
        self, n: int, mean: torch.Tensor, var: torch.Tensor
    ) -> tuple[int, torch.Tensor, torch.Tensor]:
        """The count, mean and (population) variance of all ranks' batches together, from
        each one's: sums of n, n mean and n (var + mean^2), in float64."""
        n = int(n * self.weight)
        packed = torch.cat(
            [
                torch.tensor([float(n)], dtype=torch.float64, device=mean.device),
                (n * mean.double()).reshape(-1),
                (n * (var.double() + mean.double().square())).reshape(-1),
            ]
        )
        dist.all_reduce(packed)
        total = int(round(packed[0].item()))
        k = mean.numel()
        if total == 0:
            return 0, mean, var
        all_mean = packed[1 : 1 + k] / total
        all_var = (packed[1 + k :] / total - all_mean.square()).clamp(min=0.0)
        return total, all_mean.view_as(mean).to(mean.dtype), all_var.view_as(var).to(var.dtype)

    # --- state and rounds -----------------------------------------------------------------------
    def broadcast_state(self, state: dict | None) -> dict:
        """Rank 0's `state` on every rank (others pass None), tensors on the CPU."""
        box: list[Any] = [_to_cpu(state) if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0, group=self._control)
        return box[0]

    def gather(self, row: RankRow) -> list[RankRow]:
        """Every rank's row of this round, in rank order."""
        mine = torch.tensor(row.as_list(), dtype=torch.float64)
        rows = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(rows, mine, group=self._control)
        return [RankRow.from_list(r.tolist()) for r in rows]

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def _to_cpu(value: Any) -> Any:
    if torch.is_tensor(value):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value
