"""The value-based family's losses: DQN and its extensions through Rainbow, QR-DQN, IQN, FQF
and Munchausen DQN, composed by settings (``ValueSettings``, declared beside this module in
``value_settings.py``).

Responsible for: the TD losses of each Q head, as pure functions of tensors.

Must not: know about networks beyond the head outputs it is given, configs beyond
``ValueSettings``, processes or logging.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from sampleforge.algo.distributional import (
    categorical_projection,
    fraction_loss,
    quantile_huber_loss,
)
from sampleforge.algo.munchausen import munchausen_targets
from sampleforge.algo.value_settings import ValueSettings


@dataclass(frozen=True)
class TDBatch:
    """The replay's side of a TD loss: the sampled transitions, all [B]."""

    actions: Tensor
    """a_t, int64: the action taken at s."""
    returns: Tensor
    """R = sum_{k < m} gamma^k r_{t+k}, the discounted rewards up to the bootstrap."""
    discounts: Tensor
    """gamma^m, or 0 when the episode terminated within the m steps (no bootstrap)."""
    weights: Tensor
    """Prioritized replay's importance weights (Schaul et al. 2016, 3.4); ones if uniform."""


@dataclass(frozen=True)
class TDLoss:
    """Output of the TD losses."""

    loss: Tensor
    """Scalar to minimise: mean_b weights_b * per-sample loss_b (with grad)."""
    priorities: Tensor
    """[B] >= 0, detached, what prioritized replay stores: |TD error| (scalar head), the
    cross-entropy to the projected target (categorical), or the quantile loss (quantile
    heads; Rainbow and QR-DQN's choices). Not scaled by the importance weights."""
    q_taken: Tensor
    """[B] detached, Q_online(s, a) of the taken actions (for logging)."""


def taken_actions(values: Tensor, actions: Tensor) -> Tensor:
    """values [B, A, ...] -> [B, ...], the entries of each row's action ``actions`` [B]."""
    index = actions.reshape(-1, 1, *([1] * (values.dim() - 2)))
    return values.gather(1, index.expand(-1, 1, *values.shape[2:])).squeeze(1)


def bootstrap_actions(
    settings: ValueSettings, next_online_q: Tensor, next_target_q: Tensor
) -> Tensor:
    """a* = argmax_a Q(s', a) [B] from the online network's values (Double DQN, van Hasselt et
    al. 2016, eq. 4) if ``settings.double_q``, else from the target network's (Mnih et al.
    2015). next_online_q, next_target_q: [B, A]."""
    chosen = next_online_q if settings.double_q else next_target_q
    return chosen.detach().argmax(dim=1)


def _check_batch(batch: TDBatch, batch_size: int) -> None:
    """One-line ValueError unless every batch field is [B] (a [B, 1] column would broadcast
    silently into a [B, B] loss) and the actions are int64. Shapes only: checking the action
    range would copy from the device every update (``gather`` rejects it on the CPU)."""
    for name in ("actions", "returns", "discounts", "weights"):
        shape = tuple(getattr(batch, name).shape)
        if shape != (batch_size,):
            raise ValueError(f"TDBatch.{name} must have shape ({batch_size},); got {shape}")
    if batch.actions.dtype != torch.int64:
        raise ValueError(f"TDBatch.actions must be int64; got {batch.actions.dtype}")


def _no_munchausen(settings: ValueSettings, head: str) -> None:
    if settings.munchausen:
        raise ValueError(f"munchausen applies to the scalar Q head only; got the {head} head")


def scalar_td_loss(
    settings: ValueSettings,
    *,
    q: Tensor,
    next_online_q: Tensor,
    next_target_q: Tensor,
    batch: TDBatch,
    target_q_now: Tensor | None = None,
) -> TDLoss:
    """DQN's TD loss (Mnih et al. 2015), with Double DQN's bootstrap action and Munchausen
    DQN's target (Vieillard et al. 2020, eq. 2) as ``settings`` say:

        y = R + d Q_target(s', a*)                                     (DQN, Double DQN)
        y = R + alpha [tau log pi(a|s)]_{l0}^0
              + d sum_a' pi(a'|s') (Q_target(s', a') - tau log pi(a'|s'))  (Munchausen)
        l = Huber(Q(s, a) - y)  (smooth L1, kappa = 1)   or   (Q(s, a) - y)^2 / 2

    with pi = softmax(Q_target / tau). Munchausen's soft bootstrap replaces the max, so
    ``double_q`` does not apply to it. The squared error is halved so that it and the Huber
    loss agree for |TD error| <= 1.

    q: [B, A] Q_online(s, .) (with grad); next_online_q, next_target_q: [B, A] at s';
    target_q_now: [B, A] Q_target(s, .), needed by Munchausen only.
    """
    _check_batch(batch, q.shape[0])
    with torch.no_grad():
        next_target_q = next_target_q.detach()
        if settings.munchausen:
            if target_q_now is None:
                raise ValueError("munchausen needs target_q_now = Q_target(s, .); got None")
            y = munchausen_targets(
                rewards=batch.returns,
                discounts=batch.discounts,
                actions=batch.actions,
                target_q=target_q_now.detach(),
                next_target_q=next_target_q,
                tau=settings.munchausen_tau,
                alpha=settings.munchausen_alpha,
                log_policy_clip=settings.munchausen_clip,
            )
        else:
            best = bootstrap_actions(settings, next_online_q, next_target_q)
            y = batch.returns + batch.discounts * taken_actions(next_target_q, best)
    q_taken = taken_actions(q, batch.actions)
    td_error = q_taken - y
    if settings.huber_loss:
        per_sample = F.smooth_l1_loss(q_taken, y, reduction="none", beta=1.0)
    else:
        per_sample = 0.5 * td_error.pow(2)
    return TDLoss(
        loss=(batch.weights.detach() * per_sample).mean(),
        priorities=td_error.detach().abs(),
        q_taken=q_taken.detach(),
    )


def categorical_td_loss(
    settings: ValueSettings,
    *,
    logits: Tensor,
    next_online_q: Tensor,
    next_target_logits: Tensor,
    support: Tensor,
    batch: TDBatch,
) -> TDLoss:
    """C51's loss (Bellemare et al. 2017, Algorithm 1), as Rainbow uses it (Hessel et al.
    2018, eq. 3, with the double bootstrap action):

        a* = argmax_a Q(s', a),  Q_target(s', a) = sum_j p_target(s', a)_j z_j
        m  = Phi(R + d z, p_target(s', a*))        (projected onto the support z)
        l  = -sum_j m_j log p(s, a)_j               (cross-entropy; Rainbow's priority)

    logits: [B, A, N] online (with grad); next_online_q: [B, A] online Q(s', .);
    next_target_logits: [B, A, N] target at s'; support: [N] the atoms z, evenly spaced.
    Munchausen does not apply here (scalar head only).
    """
    _no_munchausen(settings, "categorical")
    _check_batch(batch, logits.shape[0])
    support = support.detach()  # the fixed atoms: nothing learns them
    with torch.no_grad():
        next_probs = torch.softmax(next_target_logits.detach(), dim=-1)  # [B, A, N]
        next_target_q = (next_probs * support).sum(dim=-1)
        best = bootstrap_actions(settings, next_online_q, next_target_q)
        target = categorical_projection(
            next_probs=taken_actions(next_probs, best),
            returns=batch.returns,
            discounts=batch.discounts,
            support=support,
        )
    log_probs = torch.log_softmax(taken_actions(logits, batch.actions), dim=-1)  # [B, N]
    cross_entropy = -(target * log_probs).sum(dim=1)
    q_taken = (log_probs.detach().exp() * support).sum(dim=1)
    return TDLoss(
        loss=(batch.weights.detach() * cross_entropy).mean(),
        priorities=cross_entropy.detach(),
        q_taken=q_taken,
    )


def quantile_td_loss(
    settings: ValueSettings,
    *,
    quantiles: Tensor,
    fractions: Tensor,
    next_online_q: Tensor,
    next_target_quantiles: Tensor,
    batch: TDBatch,
    kappa: float = 1.0,
    next_target_q: Tensor | None = None,
) -> TDLoss:
    """The quantile regression TD loss of QR-DQN (Dabney et al. 2018a, Algorithm 1), IQN
    (Dabney et al. 2018b, eq. 3-4) and FQF (Yang et al. 2019, eq. 5):

        a*       = argmax_a Q(s', a),  Q_target(s', a) = mean_j theta_target(s', a)_j
        T theta_j = R + d theta_target(s', a*)_j                      j = 1..M
        l        = sum_i mean_j rho^kappa_{tau_i}(T theta_j - theta(s, a)_i)   i = 1..N

    quantiles: [B, A, N] online theta(s, .) (with grad) at ``fractions`` [B, N] or [N] (QR-DQN's
    fixed midpoints, IQN's samples, FQF's proposed tau_hat); next_online_q: [B, A] online
    Q(s', .); next_target_quantiles: [B, A, M] target at s' (IQN: at its own sampled
    fractions). ``next_target_q`` [B, A]: the target's values for a* without double_q when
    they are not the plain mean (FQF weighs the quantiles by the proposal's widths).
    ``q_taken`` is the mean of the taken action's quantiles. Munchausen does not apply here
    (scalar head only).
    """
    _no_munchausen(settings, "quantile")
    _check_batch(batch, quantiles.shape[0])
    with torch.no_grad():
        next_quantiles = next_target_quantiles.detach()
        if next_target_q is None:
            next_target_q = next_quantiles.mean(dim=-1)
        best = bootstrap_actions(settings, next_online_q, next_target_q)
        targets = batch.returns[:, None] + batch.discounts[:, None] * taken_actions(
            next_quantiles, best
        )
    taken = taken_actions(quantiles, batch.actions)  # [B, N]
    per_sample = quantile_huber_loss(
        quantiles=taken, targets=targets, fractions=fractions.detach(), kappa=kappa
    )
    return TDLoss(
        loss=(batch.weights.detach() * per_sample).mean(),
        priorities=per_sample.detach(),
        q_taken=taken.detach().mean(dim=1),
    )


def fqf_fraction_loss(
    *, tau: Tensor, quantiles_at_tau: Tensor, quantiles_at_tau_hat: Tensor, actions: Tensor
) -> Tensor:
    """FQF's fraction loss for the taken actions (Yang et al. 2019, Proposition 1; see
    ``distributional.fraction_loss``): the proposal at s is trained to minimise the
    1-Wasserstein distance to Z(s, a) of the action a taken there.

    tau: [B, N + 1] the proposal (with grad); quantiles_at_tau: [B, A, N - 1] the online
    quantiles at the inner fractions tau_1..tau_{N-1}; quantiles_at_tau_hat: [B, A, N] at
    the midpoints; actions: [B] int64 -> scalar.
    """
    return fraction_loss(
        tau=tau,
        quantiles_at_tau=taken_actions(quantiles_at_tau, actions),
        quantiles_at_tau_hat=taken_actions(quantiles_at_tau_hat, actions),
    )
