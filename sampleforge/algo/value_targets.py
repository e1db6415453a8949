"""Bootstrapped targets for action-value learning: n-step returns and Q(lambda).

Responsible for: the n-step return of a transition taken from a replay window (DQN family,
Rainbow's multi-step learning, Hessel et al. 2018 eq. 2) and the Q(lambda) targets of a whole
rollout (PQN, Gallici et al. 2024, eq. 7; Peng & Williams 1996), both honouring the episode
ends of the rollout encoding.

Must not: compute gradients (targets are constants, everything runs under ``torch.no_grad()``),
know about networks, configs, processes or logging, or import anything but torch.

Episode ends are encoded as in ``sampleforge.algo.gae`` and the env split:
    * a termination at step t is ``dones[t] = 1``: nothing is bootstrapped after it;
    * a truncation at step t is ``dones[t] = 0`` with the true final observation at t + 1,
      followed by a reset step (``valids[t + 1] = 0``, ``dones[t + 1] = 1``, reward 0). The
      final observation is bootstrapped from, and no return runs through the reset step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from sampleforge.algo.gae import step_discounts, valid_mask


@dataclass(frozen=True)
class NStepReturns:
    """Output of :func:`n_step_returns`. All tensors are [B] and carry no grad.

    The target of the sampled transition is ``returns + discounts * Q(obs[steps])``, where
    ``obs[k]`` is the observation k steps after the sampled one.
    """

    returns: Tensor
    """sum_{k < steps} gamma^k r_k: the discounted rewards up to the bootstrap."""
    discounts: Tensor
    """gamma^steps, or 0 when the episode terminated within the window (no bootstrap)."""
    steps: Tensor
    """How many steps ahead the bootstrap observation is, 1..n (int64)."""


@torch.no_grad()
def n_step_returns(
    *, rewards: Tensor, dones: Tensor, valids: Tensor | None, gamma: float
) -> NStepReturns:
    """n-step returns of the transitions in row 0 of each window (Hessel et al. 2018, eq. 2).

    R_t^(n) = sum_{k=0}^{m-1} gamma^k r_{t+k},  target = R_t^(n) + gamma^m max_a Q(s_{t+m}, a)

    where m <= n stops early at an episode end: after a termination (``dones[t+k] = 1``) the
    bootstrap term is dropped; before a reset step (``valids[t+k] = 0``, the step after a
    truncation) the final observation ``s_{t+k}`` is bootstrapped from, with m = k.

    rewards, dones, valids: [n, B], row k the step k after the sampled one (row 0 must be a
    valid step) -> NStepReturns of [B] tensors.
    """
    n = rewards.shape[0]
    valid = valid_mask(valids, rewards)
    returns = torch.zeros_like(rewards[0])
    discounts = torch.ones_like(rewards[0])
    steps = torch.zeros(rewards.shape[1:], dtype=torch.int64, device=rewards.device)
    running = torch.ones_like(valid[0])  # the window has not met an episode end yet
    for k in range(n):
        running = running & (valid[k] | (k == 0))  # a reset step ends it before step k
        returns = returns + torch.where(running, discounts * rewards[k], 0.0)
        terminated = running & (dones[k] > 0)
        discounts = torch.where(running, discounts * gamma, discounts)
        discounts = torch.where(terminated, 0.0, discounts)
        steps = steps + running.long()
        running = running & ~terminated
    return NStepReturns(returns=returns, discounts=discounts, steps=steps)


@torch.no_grad()
def q_lambda_targets(
    *,
    rewards: Tensor,
    dones: Tensor,
    valids: Tensor | None,
    max_q: Tensor,
    bootstrap_max_q: Tensor,
    gamma: float,
    lambda_: float,
) -> Tensor:
    """Peng's Q(lambda) returns over a time-major rollout, as PQN trains on (Gallici et al.
    2024, eq. 7):

        G_t = r_t + gamma_t [ lambda G_{t+1} + (1 - lambda) max_a Q(s_{t+1}, a) ],
        G_T = max_a Q(s_T, a),

    with gamma_t = gamma (1 - dones[t]). At a reset step j (``valids[j] = 0``, after a
    truncation) the recursion restarts: G_j = max_a Q(s_j, a), the final observation's value.

    rewards, dones, valids, max_q: [T, B] (max_q[t] = max_a Q(s_t, a)); bootstrap_max_q: [B]
    -> G: [T, B]. lambda_ = 0 gives one-step Q-learning targets, 1 the Monte-Carlo return
    bootstrapped at T.
    """
    gammas = step_discounts(dones, gamma, rewards.dtype)
    valid = valid_mask(valids, rewards)
    targets = torch.empty_like(rewards)
    next_return, next_max_q = bootstrap_max_q, bootstrap_max_q
    for t in reversed(range(rewards.shape[0])):
        g = rewards[t] + gammas[t] * (lambda_ * next_return + (1.0 - lambda_) * next_max_q)
        targets[t] = torch.where(valid[t], g, max_q[t])
        next_return, next_max_q = targets[t], max_q[t]
    return targets
