"""Running mean / variance statistics for observation and return normalisation.

Responsible for: keeping per-element running mean and variance of a stream of tensors as module
buffers (so they are saved in ``state_dict`` and move with ``.to(device)``), merging new batches
with the parallel-variance formula, normalising + clipping inputs, and mapping normalised values
back (``denormalize``, used for the critic's output under ``normalize_returns``). In a
data-parallel run a ``moment_reducer`` merges each batch's moments with the other ranks' first,
so every rank's statistics stay equal to one process's over all the data.

Must not: decide *which* observations get normalised or *when* statistics are updated (the
actor-critic and the learner decide that), and must not hold any optimiser state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

MomentReducer = Callable[[int, torch.Tensor, torch.Tensor], tuple[int, torch.Tensor, torch.Tensor]]


class RunningMeanStd(nn.Module):
    """Per-element running mean/variance over the leading batch dimension.

    Buffers (all in ``state_dict``): ``mean`` [*shape] float32, ``var`` [*shape] float32
    (population variance), ``count`` [] int64 (number of samples merged so far).
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: Sequence[int], *, epsilon: float = 1e-8, clip: float = 5.0) -> None:
        super().__init__()
        self.shape = tuple(int(d) for d in shape)
        self.epsilon = float(epsilon)
        self.clip = float(clip)
        self.register_buffer("mean", torch.zeros(self.shape, dtype=torch.float32))
        self.register_buffer("var", torch.ones(self.shape, dtype=torch.float32))
        # An exact integer count: a float32 count silently stops growing after ~1e7 samples.
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))
        # (n, mean, var) of a batch -> those of every rank's batch together (data-parallel
        # training sets it: distributed/learner_group.py); None: this process's batch alone.
        self.moment_reducer: MomentReducer | None = None

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge a batch into the statistics. x: [N, *shape] (any float/int dtype)."""
        x = x.reshape(-1, *self.shape).to(self.mean.dtype)
        n = x.shape[0]
        if n == 0 and self.moment_reducer is None:
            return
        batch_mean = x.mean(dim=0) if n else torch.zeros_like(self.mean)
        batch_var = x.var(dim=0, unbiased=False) if n else torch.zeros_like(self.var)
        if self.moment_reducer is not None:  # a collective: every rank calls it, even empty
            n, batch_mean, batch_var = self.moment_reducer(n, batch_mean, batch_var)
            if n == 0:
                return
        # Chan et al. parallel merge, written with weight fractions rather than raw counts so
        # precision does not degrade as the total count grows.
        old = self.count.to(self.mean.dtype)
        total = old + n
        w_new = n / total
        w_old = old / total
        delta = batch_mean - self.mean
        self.mean.add_(delta * w_new)
        self.var.copy_(self.var * w_old + batch_var * w_new + delta.square() * (w_old * w_new))
        self.count.add_(n)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """(x - mean) / std, clipped to [-clip, clip]. x: [..., *shape] -> same shape, float32."""
        x = x.to(self.mean.dtype)
        y = (x - self.mean) * torch.rsqrt(self.var + self.epsilon)
        return y.clamp(-self.clip, self.clip)

    def denormalize(self, y: torch.Tensor) -> torch.Tensor:
        """Inverse of ``normalize`` (without its clipping): y * std + mean. Keeps gradients.

        y: [..., *shape] -> same shape, float32.
        """
        y = y.to(self.mean.dtype)
        return y * self.std() + self.mean

    def std(self) -> torch.Tensor:
        """The running standard deviation, [*shape] (epsilon included, as in ``normalize``)."""
        return torch.sqrt(self.var + self.epsilon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Alias of ``normalize`` so the module can be used like any other layer."""
        return self.normalize(x)

    def extra_repr(self) -> str:
        return f"shape={self.shape}, clip={self.clip}"
