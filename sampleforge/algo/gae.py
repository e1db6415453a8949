"""Generalized Advantage Estimation and n-step returns over a time-major rollout.

Responsible for: turning a rollout of rewards, state values and episode ends into
advantages and value targets with no importance correction (on-policy estimators),
plus the small rollout helpers (per-step discounts, next-state values, shape checks)
that the V-trace module reuses.

Must not: compute gradients (everything here runs under ``torch.no_grad()``), know
about networks, configs, processes or logging, or import anything but torch.

Conventions (shared by the whole ``algo`` package):
    * tensors are time-major, ``[T, B]``;
    * ``dones[t] = 1`` if the episode ended with the transition taken at step t, so
      the discount applied to ``V(x_{t+1})`` is ``gamma_t = gamma * (1 - dones[t])``;
    * ``values[t] = V(x_t)`` for t < T and ``bootstrap_value = V(x_T)``;
    * ``valids[t] = 0`` excludes the transition taken at step t: it gets a zero
      advantage and the backward recursion does not pass through it. ``V(x_t)`` of an
      excluded step is still used to bootstrap the valid step before it, because the
      observation ``x_t`` itself is genuine.
"""

from __future__ import annotations

import torch
from torch import Tensor


def check_rollout_shapes(
    *, values: Tensor, bootstrap_value: Tensor, **per_step: Tensor | None
) -> None:
    """Raise ValueError unless ``values`` is ``[T, B]``, ``bootstrap_value`` is ``[B]`` and
    every tensor in ``per_step`` (None entries are skipped) is ``[T, B]``."""
    if values.dim() != 2:
        raise ValueError(f"values must be time-major [T, B], got shape {tuple(values.shape)}")
    if bootstrap_value.shape != values.shape[1:]:
        raise ValueError(
            f"bootstrap_value must have shape [B] = {tuple(values.shape[1:])}, "
            f"got {tuple(bootstrap_value.shape)}"
        )
    for name, tensor in per_step.items():
        if tensor is not None and tensor.shape != values.shape:
            raise ValueError(
                f"{name} must have the same [T, B] shape as values {tuple(values.shape)}, "
                f"got {tuple(tensor.shape)}"
            )


def step_discounts(dones: Tensor, gamma: float, dtype: torch.dtype) -> Tensor:
    """gamma_t = gamma * (1 - dones[t]): zero where the episode ended at step t. Shape [T, B]."""
    return gamma * (1.0 - dones.to(dtype))


def next_values(values: Tensor, bootstrap_value: Tensor) -> Tensor:
    """V(x_{t+1}) for t < T, i.e. ``values`` shifted by one with ``bootstrap_value`` appended.

    values: [T, B], bootstrap_value: [B] -> [T, B]
    """
    return torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)


def valid_mask(valids: Tensor | None, like: Tensor) -> Tensor:
    """Boolean [T, B] mask of the transitions to use (all True when ``valids`` is None)."""
    if valids is None:
        return torch.ones_like(like, dtype=torch.bool)
    return valids > 0


def backward_discounted_sum(deltas: Tensor, decay: Tensor) -> Tensor:
    """y_t = deltas_t + decay_t * y_{t+1} for t = T-1 .. 0, with y_T = 0.

    deltas, decay: [T, B] -> y: [T, B]. Vectorised over B, a plain loop over T.
    """
    out = torch.zeros_like(deltas)
    acc = torch.zeros_like(deltas[0])
    for t in reversed(range(deltas.shape[0])):
        acc = deltas[t] + decay[t] * acc
        out[t] = acc
    return out


def gae_advantages(
    *,
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    dones: Tensor,
    gamma: float,
    lambda_: float,
    valids: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """GAE(gamma, lambda) advantages and the matching value targets.

    Schulman et al. 2016, eq. 16:  A_t = sum_{l>=0} (gamma lambda)^l delta_{t+l},
    with the TD error  delta_t = r_t + gamma_t V(x_{t+1}) - V(x_t),
    computed backwards as  A_t = delta_t + gamma_t lambda A_{t+1},  A_T = 0.
    lambda = 0 gives the one-step TD error, lambda = 1 the bootstrapped n-step return
    minus V(x_t).

    Args:
        rewards: [T, B] r_t.
        values: [T, B] V(x_t).
        bootstrap_value: [B] V(x_T).
        dones: [T, B] 1.0 where the episode ended with the transition at step t.
        gamma: discount factor.
        lambda_: GAE lambda in [0, 1].
        valids: optional [T, B] 0/1 mask; excluded steps get A_t = 0 and cut the trace.

    Returns:
        (advantages [T, B], returns [T, B]) with returns = advantages + values.
    """
    check_rollout_shapes(
        values=values, bootstrap_value=bootstrap_value, rewards=rewards, dones=dones, valids=valids
    )
    with torch.no_grad():
        discounts = step_discounts(dones, gamma, values.dtype)
        use = valid_mask(valids, values)
        deltas = rewards + discounts * next_values(values, bootstrap_value) - values
        zeros = torch.zeros_like(values)
        deltas = torch.where(use, deltas, zeros)
        advantages = backward_discounted_sum(deltas, torch.where(use, discounts * lambda_, zeros))
        returns = advantages + values
    return advantages, returns


def n_step_returns(
    *, rewards: Tensor, bootstrap_value: Tensor, dones: Tensor, gamma: float
) -> Tensor:
    """Discounted return to the end of the rollout, bootstrapped with V(x_T).

    G_t = r_t + gamma_t G_{t+1},  G_T = V(x_T)
    i.e. G_t = sum_{k=t}^{T-1} (prod_{i=t}^{k-1} gamma_i) r_k + (prod_{i=t}^{T-1} gamma_i) V(x_T).
    This is the classic A3C target (Mnih et al. 2016) for a rollout whose every done is a
    termination: it bootstraps nothing at a time limit (``gae_advantages`` with lambda 1 and
    ``valids`` does).

    rewards: [T, B], bootstrap_value: [B], dones: [T, B] -> returns [T, B]
    """
    if (
        rewards.dim() != 2
        or dones.shape != rewards.shape
        or bootstrap_value.shape != rewards.shape[1:]
    ):
        raise ValueError(
            "expected rewards [T, B], dones [T, B], bootstrap_value [B]; got "
            f"{tuple(rewards.shape)}, {tuple(dones.shape)}, {tuple(bootstrap_value.shape)}"
        )
    with torch.no_grad():
        discounts = step_discounts(dones, gamma, rewards.dtype)
        returns = torch.zeros_like(rewards)
        next_return = bootstrap_value.to(rewards.dtype)  # G_T = V(x_T)
        for t in reversed(range(rewards.shape[0])):
            next_return = rewards[t] + discounts[t] * next_return
            returns[t] = next_return
    return returns
