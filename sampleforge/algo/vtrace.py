"""V-trace off-policy value targets and policy-gradient advantages (IMPALA).

Responsible for: the V-trace estimator of Espeholt et al. 2018 (eq. 1, its recursive
form in Remark 1, and the policy-gradient advantage of Section 4.2), computed by a
backward recursion over time and vectorised over the batch; and the truncated
importance ratio helper that the policy losses reuse.

Must not: compute gradients (targets are constants for the learner, everything runs
under ``torch.no_grad()``), know about networks, configs, processes or logging, or
import anything but torch.

Conventions are those of ``sampleforge.algo.gae`` (time-major ``[T, B]``,
``gamma_t = gamma * (1 - dones[t])``, ``bootstrap_value = V(x_T)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from sampleforge.algo.gae import (
    backward_discounted_sum,
    check_rollout_shapes,
    next_values,
    step_discounts,
    valid_mask,
)

# exp(20) ~ 4.9e8: far beyond any sensible clip threshold, yet finite in float32
# (and so is its square), so extreme log-probabilities cannot produce inf or NaN.
MAX_LOG_RATIO = 20.0


@dataclass(frozen=True)
class VTraceReturns:
    """Output of :func:`vtrace_targets`. All tensors are [T, B] and carry no grad."""

    vs: Tensor
    """V-trace value targets v_s (IMPALA eq. 1)."""
    pg_advantages: Tensor
    """rho_s (r_s + gamma_s v_{s+1} - V(x_s)) (IMPALA Section 4.2)."""
    clipped_rhos: Tensor
    """rho_s = min(rho_bar, pi(a_s|x_s) / mu(a_s|x_s))."""


def importance_ratio(target_log_probs: Tensor, behaviour_log_probs: Tensor) -> Tensor:
    """pi(a|x) / mu(a|x), with the log-ratio clamped to [-MAX_LOG_RATIO, MAX_LOG_RATIO]
    so that extreme log-probabilities give a large but finite ratio. Same shape as inputs."""
    log_ratio = target_log_probs - behaviour_log_probs
    return torch.exp(log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))


def vtrace_targets(
    *,
    behaviour_log_probs: Tensor,
    target_log_probs: Tensor,
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    dones: Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    valids: Tensor | None = None,
) -> VTraceReturns:
    """V-trace targets v_s and policy-gradient advantages.

    IMPALA eq. 1:
        v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t
        delta_t = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t))
        rho_t = min(rho_bar, pi(a_t|x_t)/mu(a_t|x_t)),  c_i = min(c_bar, pi(a_i|x_i)/mu(a_i|x_i))
    computed with the recursion of Remark 1, backwards from v_T = V(x_T):
        v_s - V(x_s) = delta_s + gamma_s c_s (v_{s+1} - V(x_{s+1}))
    Policy-gradient advantage (Section 4.2, with the pg rho clip equal to rho_bar):
        A_s = rho_s (r_s + gamma_s v_{s+1} - V(x_s))

    Args:
        behaviour_log_probs: [T, B] log mu(a_t|x_t) of the acting policy.
        target_log_probs: [T, B] log pi(a_t|x_t) of the policy being learned.
        rewards: [T, B] r_t.
        values: [T, B] V(x_t) under the learned value function.
        bootstrap_value: [B] V(x_T).
        dones: [T, B] 1.0 where the episode ended with the transition at step t.
        gamma: discount factor.
        rho_bar: truncation of rho (fixed point of the value targets).
        c_bar: truncation of the trace coefficients c (speed of convergence).
        valids: optional [T, B] 0/1 mask; excluded steps get rho = c = 0, so v_s = V(x_s)
            there, their advantage is 0 and the trace does not pass through them.

    Returns:
        VTraceReturns with vs, pg_advantages and clipped_rhos, each [T, B].
    """
    check_rollout_shapes(
        values=values,
        bootstrap_value=bootstrap_value,
        behaviour_log_probs=behaviour_log_probs,
        target_log_probs=target_log_probs,
        rewards=rewards,
        dones=dones,
        valids=valids,
    )
    with torch.no_grad():
        use = valid_mask(valids, values)
        zeros = torch.zeros_like(values)
        rhos = importance_ratio(target_log_probs, behaviour_log_probs)
        clipped_rhos = torch.where(use, rhos.clamp(max=rho_bar), zeros)
        cs = torch.where(use, rhos.clamp(max=c_bar), zeros)
        discounts = step_discounts(dones, gamma, values.dtype)
        values_tp1 = next_values(values, bootstrap_value)

        td_errors = rewards + discounts * values_tp1 - values
        deltas = torch.where(use, clipped_rhos * td_errors, zeros)
        vs_minus_values = backward_discounted_sum(deltas, discounts * cs)
        vs = values + vs_minus_values

        vs_tp1 = next_values(vs, bootstrap_value)
        pg_td = rewards + discounts * vs_tp1 - values
        pg_advantages = torch.where(use, clipped_rhos * pg_td, zeros)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages, clipped_rhos=clipped_rhos)
