"""Action heads: map core features to action distributions.

Responsible for: the categorical head for Discrete / MultiDiscrete / Tuple(Discrete...) spaces
(independent categorical sub-heads; log-prob and entropy summed over sub-heads) and the diagonal
Gaussian head for Box spaces (state-independent learned log-std, initialised at 0), plus
``make_action_head``. Every distribution exposes ``sample``, ``mode``, ``log_prob`` and
``entropy`` over a flat action batch ``[N, A]`` whose dtype matches ``spaces.action_spec``; the
categorical one also ``symmetric_kl_to_uniform`` (the ``symmetric_kl`` exploration loss).

Must not: clip or convert actions for the environment (``spaces.actions_to_env`` does that),
compute values, or contain loss logic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from sampleforge.models.init_schemes import POLICY_HEAD_GAIN, orthogonal_init
from sampleforge.spaces import action_spec, categorical_sizes

# Bounds on the Gaussian log-std used at evaluation time: keep std in [~2e-9, ~7.4] so
# log-probs stay finite even if the raw parameter drifts.
_LOG_STD_MIN, _LOG_STD_MAX = -20.0, 2.0
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _init_policy_linear(layer: nn.Linear) -> None:
    orthogonal_init(layer, POLICY_HEAD_GAIN)


class MultiCategoricalDistribution:
    """Independent categoricals over K sub-actions (K = 1 for Discrete).

    logits: [N, sum(sizes)], split per sub-head. Actions are [N, K] int64 category indices.
    """

    def __init__(self, logits: torch.Tensor, sizes: Sequence[int]) -> None:
        self.sizes = tuple(int(s) for s in sizes)
        self.logits = list(logits.split(self.sizes, dim=-1))
        self.log_probs = [F.log_softmax(chunk, dim=-1) for chunk in self.logits]

    def sample(self) -> torch.Tensor:
        """Random actions [N, K] int64."""
        samples = [torch.multinomial(lp.exp(), 1) for lp in self.log_probs]
        return torch.cat(samples, dim=-1)

    def mode(self) -> torch.Tensor:
        """Most likely actions [N, K] int64."""
        return torch.stack([chunk.argmax(dim=-1) for chunk in self.logits], dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """actions: [N, K] (any numeric dtype holding indices) -> summed log-prob [N]."""
        index = actions.long()
        per_head = [
            lp.gather(-1, index[:, k : k + 1]).squeeze(-1) for k, lp in enumerate(self.log_probs)
        ]
        return torch.stack(per_head, dim=-1).sum(dim=-1)

    def entropy(self) -> torch.Tensor:
        """Summed entropy over sub-heads [N]."""
        per_head = [-(lp.exp() * lp).sum(dim=-1) for lp in self.log_probs]
        return torch.stack(per_head, dim=-1).sum(dim=-1)

    def symmetric_kl_to_uniform(self) -> torch.Tensor:
        """(KL(pi || U) + KL(U || pi)) / 2 per sub-head, summed over sub-heads [N].

        U is the uniform distribution over the head's n actions. Near U it equals
        log n - H(pi) to second order, so it pushes as an entropy bonus does; but its
        gradient does not vanish as pi becomes deterministic, since KL(U || pi) =
        -log n - mean_a log pi(a) grows without bound as any pi(a) goes to 0.
        """
        per_head = []
        for size, lp in zip(self.sizes, self.log_probs, strict=True):
            log_uniform = -math.log(size)
            kl_pi_u = (lp.exp() * (lp - log_uniform)).sum(dim=-1)
            kl_u_pi = (log_uniform - lp).mean(dim=-1)
            per_head.append(0.5 * (kl_pi_u + kl_u_pi))
        return torch.stack(per_head, dim=-1).sum(dim=-1)


class DiagGaussianDistribution:
    """Diagonal Gaussian. mean: [N, A], log_std: [A] (broadcast). Actions [N, A] float32."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor) -> None:
        self.mean = mean
        self.log_std = log_std.clamp(_LOG_STD_MIN, _LOG_STD_MAX).expand_as(mean)
        self.std = self.log_std.exp()

    def sample(self) -> torch.Tensor:
        """Random actions [N, A] float32 (unclipped, detached: actions are data, not a path
        for gradients)."""
        with torch.no_grad():
            return self.mean + self.std * torch.randn_like(self.mean)

    def mode(self) -> torch.Tensor:
        """The mean [N, A] (detached, like ``sample``)."""
        return self.mean.detach()

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """actions: [N, A] -> log-density summed over dims [N]."""
        z = (actions.to(self.mean.dtype) - self.mean) / self.std
        return (-0.5 * z.square() - self.log_std - _HALF_LOG_2PI).sum(dim=-1)

    def entropy(self) -> torch.Tensor:
        """Entropy summed over dims [N]."""
        return (0.5 + _HALF_LOG_2PI + self.log_std).sum(dim=-1)


class CategoricalActionHead(nn.Module):
    """Linear layer to concatenated logits. forward(features [N, H]) -> distribution."""

    def __init__(self, in_size: int, sizes: Sequence[int]) -> None:
        super().__init__()
        self.sizes = tuple(int(s) for s in sizes)
        self.linear = nn.Linear(int(in_size), sum(self.sizes))
        _init_policy_linear(self.linear)

    def forward(self, features: torch.Tensor) -> MultiCategoricalDistribution:
        return MultiCategoricalDistribution(self.linear(features), self.sizes)


class GaussianActionHead(nn.Module):
    """Linear layer to the mean + a learned state-independent log-std (starts at 0 => std 1).

    forward(features [N, H]) -> DiagGaussianDistribution over [N, action_dim].
    """

    def __init__(self, in_size: int, action_dim: int) -> None:
        super().__init__()
        self.mean = nn.Linear(int(in_size), int(action_dim))
        _init_policy_linear(self.mean)
        self.log_std = nn.Parameter(torch.zeros(int(action_dim)))

    def forward(self, features: torch.Tensor) -> DiagGaussianDistribution:
        return DiagGaussianDistribution(self.mean(features), self.log_std)


def make_action_head(action_space: gym.Space, in_size: int) -> nn.Module:
    """The head for this action space (raises UnsupportedSpaceError if unsupported)."""
    spec = action_spec(action_space)  # validates the space
    if isinstance(action_space, gym.spaces.Box):
        return GaussianActionHead(in_size, spec.shape[0])
    return CategoricalActionHead(in_size, categorical_sizes(action_space))
