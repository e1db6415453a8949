"""The losses of the continuous-control off-policy family: DDPG (Lillicrap et al. 2016), TD3
(Fujimoto et al. 2018), SAC (Haarnoja et al. 2018a, b) and CrossQ (Bhatt et al. 2024), which
share one critic loss and differ in their bootstrap and actor losses:

    y = R + d * [ min_k Q'_k(s', a') - alpha log pi(a'|s') ]        (critic target)
    L_Q = sum_k mean_b w_b (Q_k(s_b, a_b) - y_b)^2                   (critic loss)
    L_mu = -mean_b Q_1(s_b, mu(s_b))                                 (DDPG, TD3)
    L_pi = mean_b (alpha log pi(a_b|s_b) - min_k Q_k(s_b, a_b)),  a_b ~ pi(.|s_b)   (SAC)
    L_alpha = -mean_b log_alpha (log pi(a_b|s_b) + H_target)         (SAC's temperature)

DDPG bootstraps from its one target critic at a' = mu'(s'); TD3 from the min of two at a'
smoothed by clipped noise; SAC from the min of two minus alpha log pi at a' ~ pi(.|s'), with
no log-prob term when alpha = 0. CrossQ uses SAC's losses with no target networks (the caller
evaluates Q(s, a) and Q(s', a') in one batch-normalised pass), so it needs nothing else here.

Conventions: actions are normalised to [-1, 1] (the policy rescales them to the env's bounds
elsewhere); an ensemble of K critics gives Q-values [K, B]; R (the n-step discounted reward
sum) and d (gamma^m, 0 after a termination, gamma^m after a truncation, which bootstraps) come
from the replay as [B]; w [B] are prioritized replay's importance weights (ones if uniform).

Responsible for: the squashed Gaussian policy's reparameterised sample and log-probability,
TD3's target policy smoothing, and the critic, actor and temperature losses above, as pure
functions of tensors.

Must not: know about networks, optimisers, target-network updates, configs, processes or
logging, or import anything but torch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

_LOG_2 = math.log(2.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


# --------------------------------------------------------------------------- the policy


def squashed_gaussian_log_prob(pre_tanh: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """log pi(a|s) of a = tanh(u), u ~ N(mean, exp(log_std)^2) per action dimension
    (Haarnoja et al. 2018a, Appendix C, eq. 21):

        log pi(a|s) = sum_i [ log N(u_i; mean_i, std_i) - log(1 - tanh(u_i)^2) ]

    with log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), which stays finite where
    tanh(u) rounds to +-1 (|u| > 9 in float32, > 19 in float64).

    pre_tanh (u), mean, log_std: [B, A] -> [B].
    """
    normal = -0.5 * ((pre_tanh - mean) * torch.exp(-log_std)).pow(2) - log_std - _HALF_LOG_2PI
    log_jacobian = 2.0 * (_LOG_2 - pre_tanh - F.softplus(-2.0 * pre_tanh))
    return (normal - log_jacobian).sum(dim=-1)


def squashed_gaussian_sample(
    mean: Tensor, log_std: Tensor, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """A reparameterised sample of SAC's policy (Haarnoja et al. 2018a, eq. 11):
    u = mean + std * eps with eps ~ N(0, 1) drawn from ``generator``, so gradients reach
    ``mean`` and ``log_std``; a = tanh(u).

    mean, log_std: [B, A] -> (a [B, A] in [-1, 1], log pi(a|s) [B] from
    ``squashed_gaussian_log_prob``). ``a`` may round to +-1 for large |u|; its log-prob is
    computed from u and stays finite.
    """
    eps = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
    pre_tanh = mean + torch.exp(log_std) * eps
    return torch.tanh(pre_tanh), squashed_gaussian_log_prob(pre_tanh, mean, log_std)


def smoothed_target_actions(
    actions: Tensor,
    noise_std: float,
    noise_clip: float,
    generator: torch.Generator | None = None,
) -> Tensor:
    """TD3's target policy smoothing (Fujimoto et al. 2018, eq. 14):

        a' = clip(mu'(s') + clip(eps, -c, c), -1, 1),   eps ~ N(0, sigma^2)

    actions: [B, A] = mu'(s') in [-1, 1]; noise_std = sigma, noise_clip = c -> a' [B, A].
    noise_std = 0 returns ``actions`` itself (DDPG's bootstrap action).
    """
    if not noise_std >= 0.0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std}")
    if not noise_clip >= 0.0:
        raise ValueError(f"noise_clip must be >= 0, got {noise_clip}")
    if noise_std == 0.0:
        return actions
    eps = torch.randn(
        actions.shape, generator=generator, dtype=actions.dtype, device=actions.device
    )
    noise = (eps * noise_std).clamp(-noise_clip, noise_clip)
    return (actions + noise).clamp(-1.0, 1.0)


# --------------------------------------------------------------------------- the critics


def _check_ensemble(name: str, q: Tensor) -> None:
    if q.dim() != 2:
        raise ValueError(f"{name} must be [K, B] (K critics), got shape {tuple(q.shape)}")


def _check_batch(batch_size: int, **tensors: Tensor) -> None:
    """One-line ValueError unless every tensor is [B]: a [B, 1] column would broadcast
    silently against a [B] one into [B, B]."""
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != (batch_size,):
            raise ValueError(f"{name} must have shape ({batch_size},), got {tuple(tensor.shape)}")


def soft_bootstrap(next_q: Tensor, next_log_prob: Tensor | None, alpha: Tensor | float) -> Tensor:
    """The value of s' that the critics bootstrap from: the clipped double-Q minimum
    (Fujimoto et al. 2018, eq. 10), less SAC's entropy term (Haarnoja et al. 2018b, eq. 3):

        V(s') = min_k Q'_k(s', a') - alpha log pi(a'|s')

    next_q: [K, B] = Q'_k(s', a') (K = 1: DDPG's one critic); next_log_prob: [B] =
    log pi(a'|s'), or None for a deterministic policy (no entropy term) -> [B].
    """
    _check_ensemble("next_q", next_q)
    value = next_q.min(dim=0).values
    if next_log_prob is None:
        return value
    _check_batch(value.shape[0], next_log_prob=next_log_prob)
    return value - alpha * next_log_prob


def critic_targets(returns: Tensor, discounts: Tensor, bootstrap: Tensor) -> Tensor:
    """y = R + d V(s'), a constant (detached): R the n-step discounted reward sum, d = gamma^m
    or 0 after a termination, V(s') from ``soft_bootstrap``. All [B] -> [B]."""
    _check_batch(returns.shape[0], returns=returns, discounts=discounts, bootstrap=bootstrap)
    return (returns + discounts * bootstrap).detach()


def critic_loss(q: Tensor, targets: Tensor, weights: Tensor) -> tuple[Tensor, Tensor]:
    """The critics' weighted TD loss, summed over the ensemble so that each critic gets the
    gradient of its own mean squared error (CleanRL's q1_loss + q2_loss):

        L_Q = sum_k mean_b w_b (Q_k(s_b, a_b) - y_b)^2

    q: [K, B] = Q_k(s, a) (with grad); targets: [B] = y; weights: [B] importance weights ->
    (L_Q scalar, priorities [B] = mean_k |Q_k(s_b, a_b) - y_b|, detached, not weighted).
    """
    _check_ensemble("q", q)
    _check_batch(q.shape[1], targets=targets, weights=weights)
    td_errors = q - targets.detach()
    loss = (weights.detach() * td_errors.pow(2)).mean(dim=1).sum()
    return loss, td_errors.detach().abs().mean(dim=0)


# --------------------------------------------------------------------------- the actors


def deterministic_actor_loss(q_first: Tensor) -> Tensor:
    """DDPG's and TD3's actor loss, the deterministic policy gradient's objective (Silver et al.
    2014; Fujimoto et al. 2018 train it on the first critic only):

        L_mu = -mean_b Q_1(s_b, mu(s_b))

    q_first: [B] = Q_1(s, mu(s)), with grad through mu -> scalar.
    """
    if q_first.dim() != 1:
        raise ValueError(
            f"q_first must be [B] (the first critic), got shape {tuple(q_first.shape)}"
        )
    return -q_first.mean()


def sac_actor_loss(q_pi: Tensor, log_prob: Tensor, alpha: Tensor | float) -> Tensor:
    """SAC's policy loss (Haarnoja et al. 2018b, eq. 7, with the clipped double-Q minimum):

        L_pi = mean_b (alpha log pi(a_b|s_b) - min_k Q_k(s_b, a_b)),   a_b ~ pi(.|s_b)

    q_pi: [K, B] = Q_k(s, a) at the reparameterised sample; log_prob: [B] = log pi(a|s);
    alpha: the temperature, a constant here (detached) -> scalar.
    """
    _check_ensemble("q_pi", q_pi)
    _check_batch(q_pi.shape[1], log_prob=log_prob)
    if isinstance(alpha, Tensor):
        alpha = alpha.detach()
    return (alpha * log_prob - q_pi.min(dim=0).values).mean()


# --------------------------------------------------------------------------- the temperature


def temperature_loss(log_alpha: Tensor, log_prob: Tensor, target_entropy: float) -> Tensor:
    """SAC's automatic temperature (Haarnoja et al. 2018b, eq. 18, on log alpha):

        L_alpha = -mean_b log_alpha (log pi(a_b|s_b) + H_target)

    with log pi a constant. Its gradient, -mean(log pi + H_target), is negative when the
    policy's entropy -log pi is below the target, so descent raises alpha, and vice versa.

    log_alpha: scalar (with grad); log_prob: [B]; target_entropy: H_target -> scalar.
    """
    return -(log_alpha * (log_prob + target_entropy).detach()).mean()


def default_target_entropy(action_dim: int) -> float:
    """SAC's heuristic target entropy, -dim(A) (Haarnoja et al. 2018b, Appendix D)."""
    if action_dim < 1:
        raise ValueError(f"action_dim must be >= 1, got {action_dim}")
    return -float(action_dim)
