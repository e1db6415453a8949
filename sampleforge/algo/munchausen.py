"""Munchausen DQN's regularised target (Vieillard et al. 2020, eq. 2 and Appendix B.1).

Responsible for: the soft policy pi = softmax(q / tau) of a Q-network and the Munchausen
target built from it, as pure functions of tensors.

Must not: know about networks, configs, processes or logging, or import anything but torch.
"""

from __future__ import annotations

import torch
from torch import Tensor


def soft_log_policy(q: Tensor, tau: float) -> Tensor:
    """log pi(.|s) for pi = softmax(q / tau), computed stably as
    q / tau - logsumexp(q / tau). q: [B, A] -> [B, A]."""
    scaled = q / tau
    return scaled - torch.logsumexp(scaled, dim=1, keepdim=True)


@torch.no_grad()
def munchausen_targets(
    *,
    rewards: Tensor,
    discounts: Tensor,
    actions: Tensor,
    target_q: Tensor,
    next_target_q: Tensor,
    tau: float,
    alpha: float,
    log_policy_clip: float,
) -> Tensor:
    """The Munchausen target of each sampled transition (Vieillard et al. 2020, eq. 2):

        y = r + alpha [tau log pi(a|s)]_{l_0}^0
              + gamma sum_a' pi(a'|s') (q(s', a') - tau log pi(a'|s'))

    where pi = softmax(q_target / tau), the log-policy bonus is clipped to [l_0, 0]
    (``log_policy_clip`` = l_0 < 0), and gamma is ``discounts`` (gamma^n, 0 after a
    termination; the rewards may be an n-step return).

    rewards, discounts: [B]; actions: [B] (int64); target_q: [B, A] = q_target(s, .);
    next_target_q: [B, A] = q_target(s', .) -> y: [B].
    """
    log_pi = soft_log_policy(target_q, tau)
    bonus = (tau * log_pi.gather(1, actions[:, None]).squeeze(1)).clamp(log_policy_clip, 0.0)
    next_log_pi = soft_log_policy(next_target_q, tau)
    soft_value = (next_log_pi.exp() * (next_target_q - tau * next_log_pi)).sum(dim=1)
    return rewards + alpha * bonus + discounts * soft_value
