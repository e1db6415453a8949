"""An ensemble of K independent MLP critics computed in one batched pass, for the
continuous-control off-policy algorithms (SAC and TD3 keep two critics, CrossQ two with Batch
Renormalization).

Responsible for: ``EnsembleLinear``, K linear layers stored as one weight ``[K, in, out]`` and
applied with one ``torch.baddbmm``, and ``CriticEnsemble``, the K critics Q_k(x) built from
them, each member initialised as its own ``nn.Linear`` would be, optionally with CrossQ's
per-member Batch Renormalization.

Must not: build the critic's input (concatenating observation features and actions is the
algorithm's job), reduce over the members (min, mean or a random subset belong to the loss),
or hold target copies (the learner keeps the target networks).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from sampleforge.models.batch_renorm import BatchRenorm
from sampleforge.models.encoders import make_activation


class EnsembleLinear(nn.Module):
    """K independent linear layers: y[k] = x[k] @ weight[k] + bias[k].

    weight ``[K, in_features, out_features]`` (transposed against ``nn.Linear``'s ``[out, in]``
    so that baddbmm needs no transpose), bias ``[K, 1, out_features]``.
    forward(x: [K, B, in_features]) -> [K, B, out_features].
    """

    def __init__(self, in_features: int, out_features: int, num_members: int) -> None:
        super().__init__()
        if in_features < 1 or out_features < 1 or num_members < 1:
            raise ValueError(
                f"EnsembleLinear needs in_features, out_features and num_members >= 1; got "
                f"{in_features}, {out_features} and {num_members}"
            )
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.num_members = int(num_members)
        self.weight = nn.Parameter(torch.empty(num_members, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(num_members, 1, out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Each member as ``nn.Linear.reset_parameters`` initialises it: kaiming-uniform weights
        with a = sqrt(5) and a uniform bias in +-1/sqrt(fan_in).

        kaiming_uniform_ cannot be applied to the 3-D weight directly: it would take
        in * out as the fan-in. With a = sqrt(5) its bound is gain * sqrt(3 / fan_in), gain =
        sqrt(2 / (1 + a^2)) = sqrt(1/3), so both bounds are 1/sqrt(fan_in) for fan_in =
        in_features. Every element is an independent draw, so the members differ.
        """
        bound = 1.0 / math.sqrt(self.in_features)
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            self.bias.uniform_(-bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"num_members={self.num_members}"
        )


class CriticEnsemble(nn.Module):
    """K independent MLP critics Q_k(x), all evaluated on the same input in one batched pass.

    Each member is ``Linear -> act -> ... -> Linear(., 1)`` with the given hidden sizes. With
    ``batch_renorm`` (CrossQ's critic, Bhatt et al. 2024), a per-member ``BatchRenorm`` goes on
    the input and after every hidden linear layer, before its activation; the output layer is
    never normalised. The members share nothing, also not their normalisation statistics.

    forward(x: [B, in_features]) -> Q: [K, B].
    """

    def __init__(
        self,
        in_features: int,
        num_critics: int,
        hidden_sizes: Sequence[int],
        activation: str = "relu",
        batch_renorm: bool = False,
        renorm_warmup_steps: int = 100_000,
        renorm_momentum: float = 0.01,
    ) -> None:
        super().__init__()
        if in_features < 1:
            raise ValueError(f"CriticEnsemble needs in_features >= 1; got {in_features}")
        if num_critics < 1:
            raise ValueError(f"CriticEnsemble needs num_critics >= 1; got {num_critics}")
        if any(size < 1 for size in hidden_sizes):
            raise ValueError(
                f"CriticEnsemble hidden_sizes must all be >= 1; got {tuple(hidden_sizes)}"
            )
        self.in_features = int(in_features)
        self.num_critics = int(num_critics)
        self.hidden_sizes = tuple(int(size) for size in hidden_sizes)
        self.batch_renorm = bool(batch_renorm)

        def renorm(features: int) -> BatchRenorm:
            return BatchRenorm(
                features,
                momentum=renorm_momentum,
                warmup_steps=renorm_warmup_steps,
                num_members=self.num_critics,
            )

        layers: list[nn.Module] = []
        if self.batch_renorm:
            layers.append(renorm(self.in_features))
        fan_in = self.in_features
        for size in self.hidden_sizes:
            layers.append(EnsembleLinear(fan_in, size, self.num_critics))
            if self.batch_renorm:
                layers.append(renorm(size))
            # make_activation checks the name and raises on an unknown one.
            layers.append(make_activation(activation))
            fan_in = size
        layers.append(EnsembleLinear(fan_in, 1, self.num_critics))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"CriticEnsemble expects input [B, {self.in_features}]; got shape {tuple(x.shape)}"
            )
        # A view, not a copy: every member reads the same input.
        stacked = x.unsqueeze(0).expand(self.num_critics, -1, -1)
        return self.layers(stacked).squeeze(-1)
