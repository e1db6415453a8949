"""The actor of the continuous-control algorithms: observations -> actions in [-1, 1].

Responsible for: ``ContinuousActor``, an MLP over the flattened vector observations with one of
two heads: ``deterministic`` (DDPG, TD3: the action is tanh of the mean) or
``squashed_gaussian`` (SAC, CrossQ: a Gaussian of learned mean and state-dependent log-std,
squashed by tanh; `algo/continuous_control.py` samples it), with optional batch
renormalisation before every hidden activation (CrossQ); and ``vector_observation``, the one
flat float vector the actor and the critics read.

Must not: explore, rescale to the env's bounds (the policy does), or compute losses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from sampleforge.models.batch_renorm import BatchRenorm
from sampleforge.models.encoders import make_activation
from sampleforge.spaces import TensorSpec

ACTOR_DISTRIBUTIONS = ("deterministic", "squashed_gaussian")
# The Gaussian's log-std is squashed into this range (as SAC's reference implementations do):
# a wider one lets the policy collapse to a point or spread over the clamp at the bounds.
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class ActorOutput(NamedTuple):
    """The actor's head for B observations: the Gaussian's mean (or the deterministic
    pre-tanh action) [B, A] and, for squashed_gaussian, its log-std [B, A]."""

    mean: Tensor
    log_std: Tensor | None


def vector_size(obs_specs: Mapping[str, TensorSpec]) -> int:
    """Elements of the flattened observation; ValueError (one line) for images or discrete
    parts, which the continuous-control networks do not encode."""
    size = 0
    for key, spec in sorted(obs_specs.items()):
        if spec.dtype == torch.uint8 or spec.categories is not None:
            raise ValueError(
                f"continuous-control networks take float vector observations; key {key!r} "
                f"holds {'pixels' if spec.dtype == torch.uint8 else 'categories'}"
            )
        size += math.prod(spec.shape)
    return size


def vector_observation(obs: Mapping[str, Tensor]) -> Tensor:
    """obs {key: [B, ...]} -> [B, F], every key flattened, in sorted key order, as float32."""
    return torch.cat([obs[k].reshape(obs[k].shape[0], -1).float() for k in sorted(obs)], dim=1)


def mlp_layers(
    in_features: int,
    hidden_sizes: Sequence[int],
    activation: str,
    batch_renorm: BatchRenormSettings | None,
) -> tuple[nn.Sequential, int]:
    """Linear -> [BatchRenorm] -> activation per hidden size (CrossQ also renormalises the
    input); returns the layers and their output width."""
    layers: list[nn.Module] = []
    if batch_renorm is not None:
        layers.append(batch_renorm.layer(in_features))
    width = in_features
    for size in hidden_sizes:
        layers.append(nn.Linear(width, int(size)))
        if batch_renorm is not None:
            layers.append(batch_renorm.layer(int(size)))
        layers.append(make_activation(activation))
        width = int(size)
    return nn.Sequential(*layers), width


class BatchRenormSettings(NamedTuple):
    """How the batch renormalisation layers of a network are made (CrossQ)."""

    warmup_steps: int
    momentum: float

    def layer(self, features: int) -> BatchRenorm:
        return BatchRenorm(features, momentum=self.momentum, warmup_steps=self.warmup_steps)


class ContinuousActor(nn.Module):
    """An MLP actor over a flat observation vector [B, in_features] (see the module doc)."""

    def __init__(
        self,
        in_features: int,
        action_dim: int,
        *,
        distribution: str = "squashed_gaussian",
        hidden_sizes: Sequence[int] = (256, 256),
        activation: str = "relu",
        batch_renorm: BatchRenormSettings | None = None,
    ) -> None:
        super().__init__()
        if distribution not in ACTOR_DISTRIBUTIONS:
            raise ValueError(
                f"unknown actor distribution {distribution!r}; allowed: "
                f"{', '.join(ACTOR_DISTRIBUTIONS)}"
            )
        self.action_dim = int(action_dim)
        self.trunk_in_features = int(in_features)
        self.trunk, width = mlp_layers(in_features, hidden_sizes, activation, batch_renorm)
        self.mean = nn.Linear(width, self.action_dim)
        self.log_std = (
            nn.Linear(width, self.action_dim) if distribution == "squashed_gaussian" else None
        )

    def forward(self, x: Tensor) -> ActorOutput:
        h = self.trunk(x)
        if self.log_std is None:
            return ActorOutput(self.mean(h), None)
        # tanh then an affine map: the log-std's gradient never dies at a clamp's edge.
        squashed = torch.tanh(self.log_std(h))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (squashed + 1.0)
        return ActorOutput(self.mean(h), log_std)
