"""Distributional value learning: C51's categorical projection, the quantile Huber loss of
QR-DQN, IQN and FQF, and FQF's fraction loss.

Responsible for: the math of Bellemare et al. 2017 (C51, Algorithm 1), Dabney et al. 2018a
(QR-DQN, eq. 9-10), Dabney et al. 2018b (IQN, eq. 3-4) and Yang et al. 2019 (FQF, eq. 6 and
Proposition 1), as pure functions of tensors.

Must not: know about networks, configs, processes or logging, or import anything but torch.

Shapes: B is the batch, N the atoms or quantiles of the online distribution, M those of the
target distribution.
"""

from __future__ import annotations

import torch
from torch import Tensor


@torch.no_grad()
def categorical_projection(
    *, next_probs: Tensor, returns: Tensor, discounts: Tensor, support: Tensor
) -> Tensor:
    """Project the distribution of ``returns + discounts * Z(s', a*)`` onto ``support``
    (C51, Bellemare et al. 2017, Algorithm 1).

    Each atom z_j of the next distribution moves to T z_j = clip(R + d z_j, v_min, v_max) and
    its probability is split between the two neighbouring atoms of the support in proportion
    to their distance.

    next_probs: [B, N] probabilities of Z(s', a*) on ``support``; returns, discounts: [B]
    (discounts = gamma^n, or 0 after a termination); support: [N], evenly spaced and
    increasing -> target probabilities [B, N], each row summing to 1.
    """
    n_atoms = support.shape[0]
    v_min, v_max = float(support[0]), float(support[-1])
    delta_z = (v_max - v_min) / (n_atoms - 1)
    moved = (returns[:, None] + discounts[:, None] * support[None, :]).clamp(v_min, v_max)
    # b_j in [0, N - 1]; float32 rounding can put a clipped v_max a hair past N - 1.
    position = ((moved - v_min) / delta_z).clamp(0, n_atoms - 1)
    lower, upper = position.floor().long(), position.ceil().long()
    # Where T z_j lands exactly on an atom, lower == upper and all its mass goes there.
    lower_weight = torch.where(lower == upper, torch.ones_like(position), upper - position)
    upper_weight = position - lower
    target = torch.zeros_like(next_probs)
    target.scatter_add_(1, lower, next_probs * lower_weight)
    target.scatter_add_(1, upper, next_probs * upper_weight)
    return target


def quantile_huber_loss(
    *, quantiles: Tensor, targets: Tensor, fractions: Tensor, kappa: float = 1.0
) -> Tensor:
    """The quantile regression Huber loss, per sample (QR-DQN eq. 10; IQN eq. 3-4):

        rho^kappa_tau(u) = |tau - 1{u < 0}| L_kappa(u) / kappa,   u = target_j - quantile_i
        loss = sum_i mean_j rho^kappa_{tau_i}(u_ij)

    with the Huber loss L_kappa(u) = u^2 / 2 for |u| <= kappa, kappa (|u| - kappa / 2) else.
    kappa = 0 gives the plain quantile regression loss |tau - 1{u < 0}| |u|.

    quantiles: [B, N] online quantile values; targets: [B, M] target samples (constants);
    fractions: [B, N] or [N], the quantile fraction tau_i each online value estimates -> [B].
    """
    u = targets[:, None, :] - quantiles[:, :, None]  # [B, N, M]
    if kappa > 0:
        huber = torch.where(u.abs() <= kappa, 0.5 * u.pow(2), kappa * (u.abs() - 0.5 * kappa))
        huber = huber / kappa
    else:
        huber = u.abs()
    tau = fractions if fractions.dim() == 2 else fractions.expand(quantiles.shape[0], -1)
    weight = (tau[:, :, None] - (u.detach() < 0).to(u.dtype)).abs()
    return (weight * huber).mean(dim=2).sum(dim=1)


def qr_fractions(num_quantiles: int, *, device=None, dtype=torch.float32) -> Tensor:
    """QR-DQN's fixed quantile midpoints tau_hat_i = (2i + 1) / (2N), i = 0..N-1 (Dabney et
    al. 2018a, Lemma 2) -> [N]."""
    i = torch.arange(num_quantiles, device=device, dtype=dtype)
    return (2 * i + 1) / (2 * num_quantiles)


def fraction_proposal(logits: Tensor) -> tuple[Tensor, Tensor]:
    """FQF's proposed fractions from the fraction network's logits (Yang et al. 2019, 3.1):
    tau_0 = 0 < tau_1 < ... < tau_N = 1 as the cumulative sum of softmax(logits), and their
    midpoints tau_hat_i = (tau_i + tau_{i+1}) / 2.

    logits: [B, N] -> (tau: [B, N + 1], tau_hat: [B, N]).
    """
    probs = torch.softmax(logits, dim=1)
    tau = torch.cat([torch.zeros_like(probs[:, :1]), probs.cumsum(dim=1)], dim=1)
    tau = torch.cat([tau[:, :-1], torch.ones_like(tau[:, :1])], dim=1)  # exactly 1 at the end
    return tau, (tau[:, :-1] + tau[:, 1:]) / 2


def fraction_loss(*, tau: Tensor, quantiles_at_tau: Tensor, quantiles_at_tau_hat: Tensor) -> Tensor:
    """FQF's fraction loss, whose gradient with respect to each inner fraction tau_i is that of
    the 1-Wasserstein distance (Yang et al. 2019, Proposition 1):

        dW1/dtau_i = 2 F^-1(tau_i) - F^-1(tau_hat_i) - F^-1(tau_hat_{i-1}),  i = 1..N-1

    The quantile values are constants here (the fraction network alone learns from this loss);
    ``tau`` carries the gradient. tau: [B, N + 1]; quantiles_at_tau: [B, N - 1], F^-1 at the
    inner fractions tau_1..tau_{N-1}; quantiles_at_tau_hat: [B, N] -> scalar.
    """
    at_hat = quantiles_at_tau_hat.detach()
    gradient = 2 * quantiles_at_tau.detach() - at_hat[:, 1:] - at_hat[:, :-1]
    return (gradient * tau[:, 1:-1]).sum(dim=1).mean()
