"""Scalar loss terms for actor-critic learning: policy, value and entropy losses.

Responsible for: the individual differentiable loss terms (PPO clipped surrogate,
plain policy gradient, optionally clipped value regression, entropy bonus), masked
means over a 0/1 validity mask, and advantage normalisation. Each function maps
tensors of matching shape (typically ``[T, B]``) to a scalar.

Must not: compute advantages or value targets (see ``gae`` and ``vtrace``), combine
the terms into a total (see ``actor_critic_loss``), know about networks, configs,
processes or logging, or import anything but torch.

Masking: ``valids`` is an optional 0/1 tensor of the same shape as the per-sample
loss. Entries with ``valids == 0`` contribute neither to the value nor to the gradient
of any loss here, even if their inputs are huge (they are selected away with
``torch.where`` rather than multiplied by zero, so inf or NaN cannot leak in).
"""

from __future__ import annotations

import torch
from torch import Tensor

from sampleforge.algo.vtrace import importance_ratio


def masked_mean(x: Tensor, valids: Tensor | None = None) -> Tensor:
    """sum(x * valids) / max(sum(valids), 1); plain mean when ``valids`` is None.

    x: any shape, valids: same shape as x (0/1) -> scalar.
    """
    if valids is None:
        return x.mean()
    if valids.shape != x.shape:
        raise ValueError(f"valids shape {tuple(valids.shape)} != x shape {tuple(x.shape)}")
    weights = valids.to(x.dtype)
    weighted = torch.where(weights > 0, x * weights, torch.zeros_like(x))
    return weighted.sum() / weights.sum().clamp(min=1.0)


def normalize_advantages(
    advantages: Tensor, valids: Tensor | None = None, eps: float = 1e-8
) -> Tensor:
    """(A - mean(A)) / (std(A) + eps), statistics taken over valid entries only.

    Invalid entries are set to 0. advantages: any shape -> same shape.
    """
    mean = masked_mean(advantages, valids)
    centred = advantages - mean
    if valids is not None:
        centred = torch.where(valids > 0, centred, torch.zeros_like(centred))
    std = masked_mean(centred**2, valids).sqrt()
    return centred / (std + eps)


def ppo_clipped_policy_loss(
    *,
    log_probs: Tensor,
    behaviour_log_probs: Tensor,
    advantages: Tensor,
    clip_ratio: float,
    dual_clip: float | None = None,
    valids: Tensor | None = None,
) -> Tensor:
    """PPO clipped surrogate loss (Schulman et al. 2017, eq. 7), negated for minimisation.

    r_t = pi(a_t|x_t) / mu(a_t|x_t)  (log-ratio clamped to a finite range)
    L = -E[min(r_t A_t, clip(r_t, 1/(1+eps), 1+eps) A_t)]
    The clip window is symmetric in log space, [1/(1+eps), 1+eps], as in Sample Factory
    (Petrenko et al. 2020, Table A.5: [1.1^-1, 1.1] for eps = 0.1).

    The min leaves r_t A_t unbounded below where A_t < 0: an action the behaviour policy
    almost never took (mu tiny) that the current policy now favours gives a huge ratio, and one
    such sample can dominate a minibatch. Dual-clip PPO (Ye et al. 2020, eq. 5) bounds it:
    for A_t < 0 the surrogate is max(min(...), c A_t), with c = ``dual_clip`` > 1.

    log_probs: [T, B] (with grad), behaviour_log_probs: [T, B], advantages: [T, B]
    -> scalar.
    """
    ratio = importance_ratio(log_probs, behaviour_log_probs.detach())
    clipped_ratio = ratio.clamp(1.0 / (1.0 + clip_ratio), 1.0 + clip_ratio)
    advantages = advantages.detach()
    surrogate = torch.min(ratio * advantages, clipped_ratio * advantages)
    if dual_clip is not None:
        floor = torch.max(surrogate, dual_clip * advantages)
        surrogate = torch.where(advantages < 0, floor, surrogate)
    return -masked_mean(surrogate, valids)


def policy_gradient_loss(
    *, log_probs: Tensor, advantages: Tensor, valids: Tensor | None = None
) -> Tensor:
    """Plain policy-gradient loss -E[log pi(a_t|x_t) A_t] (A3C / IMPALA, no trust region).

    log_probs: [T, B] (with grad), advantages: [T, B] (treated as constants) -> scalar.
    """
    return -masked_mean(log_probs * advantages.detach(), valids)


def value_loss(
    *,
    values: Tensor,
    targets: Tensor,
    old_values: Tensor | None = None,
    clip_value: float | None = None,
    valids: Tensor | None = None,
) -> Tensor:
    """0.5 * E[(V(x_t) - target_t)^2], optionally PPO-style clipped.

    With ``clip_value`` (as in the OpenAI Baselines PPO implementation):
        V_clip = V_old + clip(V - V_old, -clip_value, clip_value)
        L = 0.5 * E[max((V - target)^2, (V_clip - target)^2)]

    values: [T, B] (with grad), targets: [T, B], old_values: [T, B] -> scalar.
    """
    targets = targets.detach()
    squared_error = (values - targets) ** 2
    if clip_value is not None:
        if old_values is None:
            raise ValueError("value_loss: clip_value requires old_values")
        old_values = old_values.detach()
        clipped_values = old_values + (values - old_values).clamp(-clip_value, clip_value)
        squared_error = torch.max(squared_error, (clipped_values - targets) ** 2)
    return 0.5 * masked_mean(squared_error, valids)


def entropy_loss(entropy: Tensor, valids: Tensor | None = None) -> Tensor:
    """-E[H(pi(.|x_t))]: minimising it maximises entropy. entropy: [T, B] -> scalar."""
    return -masked_mean(entropy, valids)
