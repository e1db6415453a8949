"""Action-value heads: what a Q-network computes from an encoder's features.

Responsible for: the scalar head of DQN, the categorical head of C51, the quantile head of
QR-DQN, the implicit quantile head of IQN (also FQF's quantile network), FQF's fraction
proposal, and the dueling and noisy variants of each, as modules that return small frozen
dataclasses.

    head                      returns                                         paper
    ScalarQHead               q [B, A]                                        Mnih et al. 2015
    CategoricalQHead          logits [B, A, N] over a fixed support, q        Bellemare et al. 2017
    QuantileQHead             quantiles [B, A, N] at fixed fractions, q       Dabney et al. 2018a
    ImplicitQuantileHead      quantiles [B, A, K] at given fractions, q       Dabney et al. 2018b
    FractionProposalHead      tau [B, N + 1], tau_hat [B, N], entropy [B]     Yang et al. 2019

Dueling (Wang et al. 2016, eq. 9): a value stream and an advantage stream combined as
V + A - mean_a A, per atom or quantile for the distributional heads (Rainbow, Hessel et al.
2018, section 3, does this on C51's logits). Noisy: every linear layer of the head is a
``NoisyLinear``.

Must not: encode observations, pick actions, compute losses or targets (``algo/`` does), or
hold optimisers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from sampleforge.algo.distributional import fraction_proposal, qr_fractions
from sampleforge.models.encoders import make_activation
from sampleforge.models.init_schemes import orthogonal_init
from sampleforge.models.noisy import NoisyLinear

_HIDDEN_GAIN = math.sqrt(2.0)
_OUTPUT_GAIN = 1.0
# FQF's fraction logits start near zero, so the first proposal is close to the evenly spaced
# fractions of QR-DQN instead of a random skew.
_FRACTION_GAIN = 0.01
# IQN's cosine embedding size n (Dabney et al. 2018b, section 3.1).
IQN_NUM_COSINES = 64


@dataclass(frozen=True)
class ScalarQOutput:
    """Output of ``ScalarQHead``."""

    q: Tensor
    """[B, A] action values."""


@dataclass(frozen=True)
class CategoricalQOutput:
    """Output of ``CategoricalQHead``."""

    logits: Tensor
    """[B, A, N] logits of each action's return distribution over the head's support."""
    q: Tensor
    """[B, A] action values sum_j p_j z_j."""

    def log_probs(self) -> Tensor:
        """[B, A, N] log-probabilities (log-softmax over the atoms)."""
        return torch.log_softmax(self.logits, dim=-1)


@dataclass(frozen=True)
class QuantileQOutput:
    """Output of ``QuantileQHead`` and ``ImplicitQuantileHead``."""

    quantiles: Tensor
    """[B, A, N] the return quantiles F^-1(tau_i) of each action."""
    fractions: Tensor
    """[B, N] the fraction tau_i each quantile estimates (for the quantile Huber loss)."""
    q: Tensor
    """[B, A] action values: the mean of the quantiles (FQF: weighted by fraction widths)."""


@dataclass(frozen=True)
class FractionProposal:
    """Output of ``FractionProposalHead`` (FQF, Yang et al. 2019, section 3.1)."""

    tau: Tensor
    """[B, N + 1] fractions, 0 = tau_0 < tau_1 < ... < tau_N = 1 (carry the gradient)."""
    tau_hat: Tensor
    """[B, N] midpoints (tau_i + tau_{i+1}) / 2, where the quantiles are evaluated."""
    entropy: Tensor
    """[B] entropy of the proposal's softmax (FQF's optional entropy bonus)."""


def _linear(in_size: int, out_size: int, *, noisy: bool, gain: float) -> nn.Module:
    if noisy:
        return NoisyLinear(in_size, out_size)  # keeps the paper's initialisation
    layer = nn.Linear(in_size, out_size)
    orthogonal_init(layer, gain)
    return layer


def _stream(
    in_size: int,
    hidden_sizes: Sequence[int],
    out_size: int,
    *,
    noisy: bool,
    layer_norm: bool,
    activation: str,
) -> nn.Sequential:
    """hidden layers (linear -> [LayerNorm] -> activation) -> linear out_size."""
    layers: list[nn.Module] = []
    size = int(in_size)
    for hidden in hidden_sizes:
        layers.append(_linear(size, int(hidden), noisy=noisy, gain=_HIDDEN_GAIN))
        if layer_norm:
            layers.append(nn.LayerNorm(int(hidden)))
        layers.append(make_activation(activation))
        size = int(hidden)
    layers.append(_linear(size, out_size, noisy=noisy, gain=_OUTPUT_GAIN))
    return nn.Sequential(*layers)


@dataclass(frozen=True)
class HeadSettings:
    """How a head's layers are built; shared by every head."""

    hidden_sizes: tuple[int, ...] = ()
    """Hidden layers of each stream between the features and the output layer."""
    dueling: bool = False
    """Separate value and advantage streams, V + A - mean_a A (Wang et al. 2016, eq. 9)."""
    noisy: bool = False
    """NoisyLinear layers (Fortunato et al. 2018) instead of nn.Linear in the head."""
    layer_norm: bool = False
    """LayerNorm before the activation of each hidden layer of the head (PQN)."""
    activation: str = "relu"
    """Activation of the hidden layers: relu, elu or tanh."""


class ActionValueStreams(nn.Module):
    """features [..., F] -> [..., A, M]: M outputs per action (1 for a scalar Q, N atoms or
    quantiles), from one stream, or from a value stream [..., 1, M] and an advantage stream
    [..., A, M] combined as V + A - mean_a A (dueling; the mean is over actions, per output)."""

    def __init__(
        self,
        in_size: int,
        num_actions: int,
        outputs_per_action: int,
        settings: HeadSettings | None = None,
    ) -> None:
        super().__init__()
        chosen = settings or HeadSettings()
        if num_actions < 1:
            raise ValueError(f"a Q-head needs at least 1 action; got {num_actions}")
        self.num_actions = int(num_actions)
        self.outputs_per_action = int(outputs_per_action)

        def stream(out_size: int) -> nn.Sequential:
            return _stream(
                in_size,
                chosen.hidden_sizes,
                out_size,
                noisy=chosen.noisy,
                layer_norm=chosen.layer_norm,
                activation=chosen.activation,
            )

        self.advantage = stream(self.num_actions * self.outputs_per_action)
        self.value = stream(self.outputs_per_action) if chosen.dueling else None

    def forward(self, features: Tensor) -> Tensor:
        advantages = self.advantage(features).unflatten(
            -1, (self.num_actions, self.outputs_per_action)
        )
        if self.value is None:
            return advantages
        value = self.value(features).unsqueeze(-2)  # [..., 1, M]
        return value + advantages - advantages.mean(dim=-2, keepdim=True)


class ScalarQHead(nn.Module):
    """DQN's head: forward(features [B, F]) -> ScalarQOutput(q [B, A])."""

    def __init__(
        self, in_size: int, num_actions: int, settings: HeadSettings | None = None
    ) -> None:
        super().__init__()
        self.num_actions = int(num_actions)
        self.streams = ActionValueStreams(in_size, num_actions, 1, settings)

    def forward(self, features: Tensor) -> ScalarQOutput:
        return ScalarQOutput(q=self.streams(features).squeeze(-1))


class CategoricalQHead(nn.Module):
    """C51's head (Bellemare et al. 2017): each action's return distribution as probabilities
    over ``num_atoms`` evenly spaced atoms z_j from ``v_min`` to ``v_max`` (``support``).

    forward(features [B, F]) -> CategoricalQOutput(logits [B, A, N], q [B, A] = sum_j p_j z_j).
    """

    support: Tensor

    def __init__(
        self,
        in_size: int,
        num_actions: int,
        *,
        num_atoms: int = 51,
        v_min: float = -10.0,
        v_max: float = 10.0,
        settings: HeadSettings | None = None,
    ) -> None:
        super().__init__()
        if num_atoms < 2:
            raise ValueError(f"num_atoms must be at least 2; got {num_atoms}")
        if not v_min < v_max:
            raise ValueError(f"v_min must be below v_max; got v_min={v_min}, v_max={v_max}")
        self.num_atoms = int(num_atoms)
        self.num_actions = int(num_actions)
        self.streams = ActionValueStreams(in_size, num_actions, self.num_atoms, settings)
        # Derived from the settings, so not part of checkpoints.
        support = torch.linspace(float(v_min), float(v_max), self.num_atoms)
        self.register_buffer("support", support, persistent=False)

    def forward(self, features: Tensor) -> CategoricalQOutput:
        logits = self.streams(features)
        q = (torch.softmax(logits, dim=-1) * self.support).sum(dim=-1)
        return CategoricalQOutput(logits=logits, q=q)


class QuantileQHead(nn.Module):
    """QR-DQN's head (Dabney et al. 2018a): ``num_quantiles`` quantiles per action at the fixed
    fractions tau_hat_i = (2i + 1) / 2N.

    forward(features [B, F]) -> QuantileQOutput(quantiles [B, A, N], fractions [B, N],
    q [B, A] = mean of the quantiles).
    """

    fractions: Tensor

    def __init__(
        self,
        in_size: int,
        num_actions: int,
        *,
        num_quantiles: int = 200,
        settings: HeadSettings | None = None,
    ) -> None:
        super().__init__()
        if num_quantiles < 1:
            raise ValueError(f"num_quantiles must be at least 1; got {num_quantiles}")
        self.num_quantiles = int(num_quantiles)
        self.num_actions = int(num_actions)
        self.streams = ActionValueStreams(in_size, num_actions, self.num_quantiles, settings)
        self.register_buffer("fractions", qr_fractions(self.num_quantiles), persistent=False)

    def forward(self, features: Tensor) -> QuantileQOutput:
        quantiles = self.streams(features)
        fractions = self.fractions.expand(features.shape[0], -1)
        return QuantileQOutput(quantiles=quantiles, fractions=fractions, q=quantiles.mean(dim=-1))


class ImplicitQuantileHead(nn.Module):
    """IQN's head (Dabney et al. 2018b, eq. 4 and section 3.1): the quantile at fraction tau is
    f(psi(x) * phi(tau)), where psi(x) are the features, * is the Hadamard product, f is the
    action-value stream, and phi is the cosine embedding

        phi_j(tau) = ReLU(sum_{i=0}^{n-1} cos(pi i tau) w_ij + b_j),   n = num_cosines.

    forward(features [B, F], fractions [B, K]) -> QuantileQOutput(quantiles [B, A, K],
    fractions, q [B, A] = mean over the K quantiles: the Monte Carlo estimate of the mean
    for sampled fractions, the midpoint rule for evenly spaced midpoints).
    """

    cosine_indices: Tensor

    def __init__(
        self,
        in_size: int,
        num_actions: int,
        *,
        num_cosines: int = IQN_NUM_COSINES,
        settings: HeadSettings | None = None,
    ) -> None:
        super().__init__()
        if num_cosines < 1:
            raise ValueError(f"num_cosines must be at least 1; got {num_cosines}")
        self.num_cosines = int(num_cosines)
        self.register_buffer(
            "cosine_indices", torch.arange(self.num_cosines, dtype=torch.float32), persistent=False
        )
        self.embedding = nn.Linear(self.num_cosines, int(in_size))
        orthogonal_init(self.embedding, _HIDDEN_GAIN)
        self.num_actions = int(num_actions)
        self.streams = ActionValueStreams(in_size, num_actions, 1, settings)

    def cosine_embedding(self, fractions: Tensor) -> Tensor:
        """phi(tau): fractions [B, K] -> [B, K, F] (eq. 4 above)."""
        cosines = torch.cos(math.pi * fractions.unsqueeze(-1) * self.cosine_indices)
        return torch.relu(self.embedding(cosines))

    def forward(self, features: Tensor, fractions: Tensor) -> QuantileQOutput:
        mixed = features.unsqueeze(1) * self.cosine_embedding(fractions)  # [B, K, F]
        quantiles = self.streams(mixed).squeeze(-1).transpose(1, 2)  # [B, K, A] -> [B, A, K]
        return QuantileQOutput(quantiles=quantiles, fractions=fractions, q=quantiles.mean(dim=-1))


def sample_fractions(batch: int, num: int, *, device: torch.device | None = None) -> Tensor:
    """IQN's fractions tau ~ U[0, 1]: [batch, num]."""
    return torch.rand(batch, num, device=device)


def midpoint_fractions(batch: int, num: int, *, device: torch.device | None = None) -> Tensor:
    """Evenly spaced midpoints (2i + 1) / 2num, [batch, num]: a deterministic set of fractions
    whose quantiles' mean is the midpoint rule for the mean return."""
    return qr_fractions(num, device=device).expand(batch, -1)


class FractionProposalHead(nn.Module):
    """FQF's fraction proposal network (Yang et al. 2019, section 3.1): a linear layer and a
    softmax over ``num_fractions`` widths, cumulated into tau_0 = 0 < ... < tau_N = 1.

    It reads the features detached: the encoder learns from the quantile loss only, the
    proposal from the fraction loss (``algo.distributional.fraction_loss``).
    forward(features [B, F]) -> FractionProposal(tau [B, N + 1], tau_hat [B, N], entropy [B]).
    """

    def __init__(self, in_size: int, num_fractions: int = 32) -> None:
        super().__init__()
        if num_fractions < 2:
            raise ValueError(f"num_fractions must be at least 2; got {num_fractions}")
        self.num_fractions = int(num_fractions)
        self.logits = nn.Linear(int(in_size), self.num_fractions)
        orthogonal_init(self.logits, _FRACTION_GAIN)

    def forward(self, features: Tensor) -> FractionProposal:
        logits = self.logits(features.detach())
        tau, tau_hat = fraction_proposal(logits)
        log_probs = torch.log_softmax(logits, dim=1)
        entropy = -(log_probs.exp() * log_probs).sum(dim=1)
        return FractionProposal(tau=tau, tau_hat=tau_hat, entropy=entropy)


@dataclass(frozen=True)
class FQFOutput(QuantileQOutput):
    """An FQF network's output: the quantiles at the proposal's midpoints ``fractions`` =
    ``proposal.tau_hat`` (detached), ``q`` weighted by the proposal's widths, and the proposal
    itself (for the fraction loss and its entropy)."""

    proposal: FractionProposal


def fraction_weighted_q(quantiles: Tensor, tau: Tensor) -> Tensor:
    """FQF's action values sum_i (tau_{i+1} - tau_i) F^-1(tau_hat_i) (Yang et al. 2019, 3.1):
    quantiles [B, A, N] at tau_hat, tau [B, N + 1] -> [B, A]. The widths are detached: the
    proposal learns from the fraction loss alone."""
    widths = (tau[:, 1:] - tau[:, :-1]).detach()
    return (quantiles * widths.unsqueeze(1)).sum(dim=-1)
