"""Batch Renormalization (Ioffe 2017), as CrossQ (Bhatt et al. 2024) uses it in its critics and
actor.

Responsible for: ``BatchRenorm``, a batch-norm layer whose training-mode output is corrected
towards the running statistics by the clamped factors r and d (Ioffe 2017, algorithm 1), with
a plain batch-norm warm-up, the running statistics and the warm-up counter as checkpointed
buffers, and per-member statistics for an ensemble's stacked input ``[K, B, F]``.

Must not: decide when the module is in training or eval mode (the learner does), or share
statistics between the members of an ensemble: each member normalises its own batch.
"""

from __future__ import annotations

import torch
from torch import nn


class BatchRenorm(nn.Module):
    """Batch Renormalization over the batch axis (dim -2) of x.

    Training mode, with the batch mean mu_B and std sigma_B = sqrt(var_B + eps) (biased
    variance) and the running std sigma = sqrt(running_var + eps)::

        r = clamp(sigma_B / sigma, 1 / r_max, r_max)          (no gradient)
        d = clamp((mu_B - running_mean) / sigma, -d_max, d_max)  (no gradient)
        y = weight * ((x - mu_B) / sigma_B * r + d) + bias

    For the first ``warmup_steps`` training forward passes r = 1 and d = 0: plain batch norm,
    as CrossQ does while the running statistics are still poor estimates. Every training pass
    then updates ``running = (1 - momentum) * running + momentum * batch`` (torch's BatchNorm
    convention; the unbiased batch variance goes into ``running_var``), with r and d computed
    from the running statistics *before* the update (algorithm 1). Eval mode normalises with
    the running statistics: y = weight * (x - running_mean) / sigma + bias.

    Shapes, fixed by ``num_members`` at construction (explicit rather than lazily shaped, so the
    state dict has its final shapes before the first batch and loads into a fresh module):

    * ``num_members == 0``: x ``[B, F]``; buffers and affine parameters ``[F]``.
    * ``num_members == K``: x ``[K, B, F]``, one ensemble member per leading index; buffers and
      affine parameters ``[K, 1, F]``, so member k's statistics come from ``x[k]`` alone.

    ``steps`` (int64 buffer, in the state dict) counts the training forward passes so far; a
    resumed run continues its warm-up where it stopped.
    """

    running_mean: torch.Tensor
    running_var: torch.Tensor
    steps: torch.Tensor

    def __init__(
        self,
        num_features: int,
        momentum: float = 0.01,
        eps: float = 1e-3,
        warmup_steps: int = 100_000,
        r_max: float = 3.0,
        d_max: float = 5.0,
        num_members: int = 0,
    ) -> None:
        super().__init__()
        if num_features < 1:
            raise ValueError(f"BatchRenorm needs num_features >= 1; got {num_features}")
        if num_members < 0:
            raise ValueError(
                f"BatchRenorm needs num_members >= 0 (0: input [B, F]); got {num_members}"
            )
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"BatchRenorm momentum must be in [0, 1]; got {momentum}")
        if eps <= 0.0:
            raise ValueError(f"BatchRenorm eps must be > 0; got {eps}")
        if warmup_steps < 0:
            raise ValueError(f"BatchRenorm warmup_steps must be >= 0; got {warmup_steps}")
        if r_max < 1.0 or d_max < 0.0:
            raise ValueError(f"BatchRenorm needs r_max >= 1 and d_max >= 0; got {r_max}, {d_max}")
        self.num_features = int(num_features)
        self.num_members = int(num_members)
        self.momentum = float(momentum)
        self.eps = float(eps)
        self.warmup_steps = int(warmup_steps)
        self.r_max = float(r_max)
        self.d_max = float(d_max)
        shape = (
            (self.num_features,)
            if self.num_members == 0
            else (self.num_members, 1, self.num_features)
        )
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))
        self.register_buffer("running_mean", torch.zeros(shape))
        self.register_buffer("running_var", torch.ones(shape))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def _check_input(self, x: torch.Tensor) -> None:
        expected_dims = 2 if self.num_members == 0 else 3
        if (
            x.dim() != expected_dims
            or x.shape[-1] != self.num_features
            or (self.num_members and x.shape[0] != self.num_members)
        ):
            expected = "[B, F]" if self.num_members == 0 else "[K, B, F]"
            raise ValueError(
                f"BatchRenorm(num_features={self.num_features}, num_members={self.num_members}) "
                f"expects input {expected}; got shape {tuple(x.shape)}"
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        if not self.training:
            running_std = (self.running_var + self.eps).sqrt()
            return (x - self.running_mean) / running_std * self.weight + self.bias
        batch_size = x.shape[-2]
        if batch_size < 2:
            # The unbiased variance for running_var needs two samples (torch's BatchNorm
            # refuses a batch of one in training mode for the same reason).
            raise ValueError(
                f"BatchRenorm needs a batch of >= 2 in training mode; got {batch_size}"
            )
        batch_mean = x.mean(dim=-2, keepdim=True)
        batch_var = x.var(dim=-2, unbiased=False, keepdim=True)
        batch_std = (batch_var + self.eps).sqrt()
        normalized = (x - batch_mean) / batch_std
        if int(self.steps) >= self.warmup_steps:
            normalized = self._renormalize(normalized, batch_mean, batch_std)
        self._update_running_stats(batch_mean, batch_var, batch_size)
        return normalized * self.weight + self.bias

    def _renormalize(
        self, normalized: torch.Tensor, batch_mean: torch.Tensor, batch_std: torch.Tensor
    ) -> torch.Tensor:
        """x_hat * r + d with r and d from the running statistics before this batch's update."""
        running_mean = self._stat_shaped(self.running_mean)
        running_std = (self._stat_shaped(self.running_var) + self.eps).sqrt()
        # r and d are treated as constants (algorithm 1): gradients flow through mu_B and
        # sigma_B only, as in plain batch norm.
        r = (batch_std.detach() / running_std).clamp(1.0 / self.r_max, self.r_max)
        d = ((batch_mean.detach() - running_mean) / running_std).clamp(-self.d_max, self.d_max)
        return normalized * r + d

    @torch.no_grad()
    def _update_running_stats(
        self, batch_mean: torch.Tensor, batch_var: torch.Tensor, batch_size: int
    ) -> None:
        unbiased_var = batch_var * (batch_size / (batch_size - 1))
        self.running_mean.lerp_(batch_mean.reshape(self.running_mean.shape), self.momentum)
        self.running_var.lerp_(unbiased_var.reshape(self.running_var.shape), self.momentum)
        self.steps += 1

    def _stat_shaped(self, stat: torch.Tensor) -> torch.Tensor:
        """A running statistic shaped like the batch statistics ([1, F] or [K, 1, F])."""
        return stat.reshape(1, -1) if self.num_members == 0 else stat

    def extra_repr(self) -> str:
        return (
            f"num_features={self.num_features}, num_members={self.num_members}, "
            f"momentum={self.momentum}, eps={self.eps}, warmup_steps={self.warmup_steps}, "
            f"r_max={self.r_max}, d_max={self.d_max}"
        )
