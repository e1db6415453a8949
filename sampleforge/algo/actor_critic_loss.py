"""The full actor-critic loss for the algorithm variants the library supports.

Responsible for: choosing advantages and value targets (V-trace or GAE) for a rollout,
and combining the policy, value and entropy terms into one scalar for
``"appo"`` (PPO clipping, Petrenko et al. 2020), ``"impala"`` (V-trace + plain policy
gradient, Espeholt et al. 2018) and ``"a3c"`` (GAE / n-step returns + plain policy
gradient, Mnih et al. 2016), together with a few diagnostic metrics; and
``ActorCriticSettings``, every hyper-parameter of these losses, declared once (the run's
``Config`` inherits it, so the learner hands the config itself to the loss).

Must not: run networks, step optimisers, read config files, log, or touch processes;
it maps tensors (and a frozen settings object with the algorithm's name) to tensors and
floats, importing only torch and the sibling ``algo`` modules.

The learner hands over one :class:`Rollout` (what the acting policy recorded and the current
network's outputs on it), and the loss reads as the papers do:

    advantages, targets = V-trace or GAE on the rollout     (_advantages_and_targets)
    policy  = PPO clipped surrogate or -log pi * advantage  (_policy_loss)
    value   = (V(x_t) - target)^2 / 2                       (value_loss)
    total   = policy + value_loss_coeff * value + entropy_coeff * exploration

where ``exploration`` is -entropy (the entropy bonus) or, with ``exploration_loss``
"symmetric_kl", the symmetric KL divergence of the policy to the uniform distribution.

Return normalisation (``value_normalizer``): the critic predicts values in units of running
statistics of the value targets. Advantages and targets are computed in reward units (the
network's values de-normalised with the current statistics), the statistics then absorb the
new targets, and the value loss compares the network's normalised output with the targets
(and, for value clipping, the behaviour values) normalised with the updated statistics, so its
magnitude does not depend on the reward's scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from sampleforge.algo.actor_critic_settings import (
    ADVANTAGE_SCALES,
    ALGORITHMS,
    EXPLORATION_LOSSES,
    ActorCriticSettings,
)
from sampleforge.algo.gae import gae_advantages
from sampleforge.algo.losses import (
    entropy_loss,
    masked_mean,
    normalize_advantages,
    policy_gradient_loss,
    ppo_clipped_policy_loss,
    value_loss,
)
from sampleforge.algo.vtrace import MAX_LOG_RATIO, importance_ratio, vtrace_targets


def check_algorithm(algorithm: str) -> None:
    """Raise ValueError unless ``algorithm`` is one of ALGORITHMS."""
    if algorithm not in ALGORITHMS:
        raise ValueError(
            f"unknown algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}"
        )


class ValueNormalizer(Protocol):
    """Running statistics of value targets (``sampleforge.models.normalizer.RunningMeanStd``)."""

    def update(self, x: Tensor) -> None:
        """Merge a 1-D batch of targets into the statistics."""

    def normalize(self, x: Tensor) -> Tensor:
        """(x - mean) / std, possibly clipped."""

    def denormalize(self, y: Tensor) -> Tensor:
        """y * std + mean (no clipping)."""

    def std(self) -> Tensor:
        """The running standard deviation of the targets."""


def check_settings(settings: ActorCriticSettings, algorithm: str) -> None:
    """Raise ValueError unless ``algorithm`` is one of ALGORITHMS and ``settings`` lie where
    the loss's math needs them (a validated config always does)."""
    check_algorithm(algorithm)
    if not 0.0 <= settings.gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {settings.gamma}")
    if not 0.0 <= settings.gae_lambda <= 1.0:
        raise ValueError(f"gae_lambda must be in [0, 1], got {settings.gae_lambda}")
    for name in ("vtrace_rho_bar", "vtrace_c_bar", "ppo_clip_ratio"):
        if not getattr(settings, name) > 0.0:
            raise ValueError(f"{name} must be > 0, got {getattr(settings, name)}")
    if settings.ppo_dual_clip is not None and not settings.ppo_dual_clip > 1.0:
        raise ValueError(f"ppo_dual_clip must be > 1 or None, got {settings.ppo_dual_clip}")
    if settings.value_clip is not None and not settings.value_clip > 0.0:
        raise ValueError(f"value_clip must be > 0 or None, got {settings.value_clip}")
    if settings.exploration_loss not in EXPLORATION_LOSSES:
        raise ValueError(
            f"exploration_loss must be one of {', '.join(EXPLORATION_LOSSES)}, "
            f"got {settings.exploration_loss!r}"
        )
    if settings.advantage_scale not in ADVANTAGE_SCALES:
        raise ValueError(
            f"advantage_scale must be one of {', '.join(ADVANTAGE_SCALES)}, "
            f"got {settings.advantage_scale!r}"
        )


def uses_vtrace(settings: ActorCriticSettings, algorithm: str) -> bool:
    """Whether advantages and value targets come from V-trace: always for "impala", for
    "appo" with ``with_vtrace``, never for "a3c"."""
    return algorithm == "impala" or (algorithm == "appo" and settings.with_vtrace)


@dataclass
class LossOutput:
    """Result of :func:`actor_critic_loss`."""

    total: Tensor
    """Scalar to minimise: policy + value_loss_coeff * value + entropy_coeff * exploration."""
    policy_loss: Tensor
    """Scalar policy term (PPO surrogate or plain policy gradient)."""
    value_loss: Tensor
    """Scalar (unweighted) value regression term."""
    entropy: Tensor
    """Scalar mean policy entropy over valid samples (positive; the bonus is its negation)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Diagnostics: approx_kl, clip_fraction, mean_rho, mean_advantage, explained_variance
    (and uniform_kl with the symmetric_kl exploration loss)."""


@dataclass(frozen=True)
class Rollout:
    """One time-major rollout: what the acting policy recorded, and the current network's
    outputs on the same steps. Per-step tensors are [T, B]; value tensors [T + 1, B], whose
    last row is the bootstrap value V(x_T)."""

    log_probs: Tensor
    """log pi(a_t|x_t) under the current network (with grad)."""
    entropy: Tensor
    """Entropy of pi(.|x_t) under the current network (with grad)."""
    values: Tensor
    """[T + 1, B] V(x_t) under the current network (with grad); with a value normaliser, the
    value head's normalised output."""
    behaviour_log_probs: Tensor
    """log mu(a_t|x_t) recorded by the acting policy."""
    behaviour_values: Tensor
    """[T + 1, B] values recorded by the acting policy, in reward units (the last row may be
    the current network's bootstrap value)."""
    rewards: Tensor
    """r_t."""
    dones: Tensor
    """1.0 where the episode ended with the transition at step t (a termination: time-limit
    truncations are bootstrapped by the rollout worker, see docs/custom_env.md)."""
    valids: Tensor | None = None
    """0/1 mask of the samples to learn from (None: all)."""
    uniform_kl: Tensor | None = None
    """Symmetric KL of pi(.|x_t) to the uniform policy (with grad); needed by the
    symmetric_kl exploration loss."""

    def check_shapes(self) -> None:
        """Raise ValueError unless per-step tensors are [T, B] and value tensors [T + 1, B]."""
        if self.log_probs.dim() != 2:
            raise ValueError(
                f"log_probs must be time-major [T, B], got {tuple(self.log_probs.shape)}"
            )
        steps, batch = self.log_probs.shape
        expected = {
            "entropy": (steps, batch),
            "behaviour_log_probs": (steps, batch),
            "rewards": (steps, batch),
            "dones": (steps, batch),
            "values": (steps + 1, batch),
            "behaviour_values": (steps + 1, batch),
        }
        for name in ("valids", "uniform_kl"):
            if getattr(self, name) is not None:
                expected[name] = (steps, batch)
        for name, shape in expected.items():
            got = tuple(getattr(self, name).shape)
            if got != shape:
                rows = "T + 1" if shape[0] == steps + 1 else "T"
                raise ValueError(f"{name} must be [{rows}, B] = {shape}, got {got}")


def actor_critic_loss(
    algorithm: str,
    settings: ActorCriticSettings,
    rollout: Rollout,
    value_normalizer: ValueNormalizer | None = None,
) -> LossOutput:
    """Actor-critic loss of ``algorithm`` (one of ALGORITHMS) on one time-major rollout.

    ``value_normalizer``: return normalisation (see the module docstring). Its statistics are
    updated in place with the valid targets (only when all of them are finite: a non-finite
    loss is skipped by the learner and must leave them as they were).
    """
    check_settings(settings, algorithm)
    rollout.check_shapes()
    value_estimates = rollout.values.detach()
    if value_normalizer is not None:
        value_estimates = value_normalizer.denormalize(value_estimates)
    advantages, targets = _advantages_and_targets(algorithm, settings, rollout, value_estimates)
    return loss_from_advantages(
        algorithm=algorithm,
        settings=settings,
        log_probs=rollout.log_probs,
        entropy=rollout.entropy,
        values=rollout.values[:-1],
        behaviour_log_probs=rollout.behaviour_log_probs,
        behaviour_values=rollout.behaviour_values[:-1],
        advantages=advantages,
        targets=targets,
        valids=rollout.valids,
        value_normalizer=value_normalizer,
        uniform_kl=rollout.uniform_kl,
    )


def advantages_and_targets(
    *,
    algorithm: str,
    settings: ActorCriticSettings,
    behaviour_values: Tensor,
    rewards: Tensor,
    dones: Tensor,
    valids: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """GAE advantages [T, B] and value targets [T, B] of "appo" without V-trace, computed once
    for a whole dataset: they depend only on what the acting policy recorded, so minibatches
    of single samples (`loss_from_advantages`) can then be drawn from anywhere in it.

    behaviour_values: [T + 1, B] in reward units, the last row being the bootstrap value.
    """
    check_settings(settings, algorithm)
    if uses_vtrace(settings, algorithm) or algorithm != "appo":
        raise ValueError(
            f"advantages depend on the current network for {algorithm} "
            f"with V-trace={uses_vtrace(settings, algorithm)}: compute them per minibatch"
        )
    return _gae(settings, behaviour_values, rewards, dones, valids)


def loss_from_advantages(
    *,
    algorithm: str,
    settings: ActorCriticSettings,
    log_probs: Tensor,
    entropy: Tensor,
    values: Tensor,
    behaviour_log_probs: Tensor,
    behaviour_values: Tensor,
    advantages: Tensor,
    targets: Tensor,
    valids: Tensor | None = None,
    value_normalizer: ValueNormalizer | None = None,
    uniform_kl: Tensor | None = None,
) -> LossOutput:
    """Policy, value and exploration terms given advantages and value targets.

    Every tensor is [T, B] (or any matching shape, e.g. [1, N] for N single samples):
    ``values`` the current network's (normalised under ``value_normalizer``, with grad),
    ``behaviour_values`` in reward units, ``advantages`` before normalisation; ``uniform_kl``
    is needed by the symmetric_kl exploration loss only.
    """
    check_settings(settings, algorithm)
    value_estimates = values
    if value_normalizer is not None:
        value_estimates = value_normalizer.denormalize(values.detach())
    normalized = _scaled_advantages(settings, advantages, valids, value_normalizer)

    policy = _policy_loss(algorithm, settings, log_probs, behaviour_log_probs, normalized, valids)
    critic_targets, critic_old_values = targets, behaviour_values
    if value_normalizer is not None:
        valid_targets = targets if valids is None else targets[valids > 0]
        if torch.isfinite(valid_targets).all():
            value_normalizer.update(valid_targets)
        # Network output, targets and old values all in the same (updated) normalised units,
        # so value_clip bounds the change of the normalised prediction.
        critic_targets = value_normalizer.normalize(targets)
        critic_old_values = value_normalizer.normalize(behaviour_values.detach())
    critic = value_loss(
        values=values,
        targets=critic_targets,
        old_values=critic_old_values,
        clip_value=settings.value_clip,
        valids=valids,
    )
    mean_entropy = -entropy_loss(entropy, valids)
    exploration = -mean_entropy
    if settings.exploration_loss == "symmetric_kl":
        if uniform_kl is None:
            raise ValueError(
                "exploration_loss 'symmetric_kl' needs the policy's KL to uniform "
                "(categorical actions only)"
            )
        exploration = masked_mean(uniform_kl, valids)
    total = policy + settings.value_loss_coeff * critic + settings.entropy_coeff * exploration

    metrics = _metrics(
        settings, log_probs, behaviour_log_probs, advantages, value_estimates, targets, valids
    )
    if settings.exploration_loss == "symmetric_kl":
        metrics["uniform_kl"] = float(exploration.detach())
    return LossOutput(
        total=total, policy_loss=policy, value_loss=critic, entropy=mean_entropy, metrics=metrics
    )


def _scaled_advantages(
    settings: ActorCriticSettings,
    advantages: Tensor,
    valids: Tensor | None,
    value_normalizer: ValueNormalizer | None,
) -> Tensor:
    """The advantages the policy gradient weighs samples by (`ActorCriticSettings.advantage_scale`)."""
    if not settings.normalize_advantages:
        return advantages
    if settings.advantage_scale == "minibatch":
        return normalize_advantages(advantages, valids)
    if value_normalizer is None:
        raise ValueError(
            "advantage_scale 'return_std' needs a value normaliser (normalize_returns)"
        )
    return advantages / value_normalizer.std()


def _advantages_and_targets(
    algorithm: str, settings: ActorCriticSettings, rollout: Rollout, values: Tensor
) -> tuple[Tensor, Tensor]:
    """Policy advantages [T, B] and value targets [T, B], both without grad; `values` are the
    current network's [T + 1, B], detached, in reward units.

    V-trace ("impala", "appo" with V-trace): V(x) = current values.
    GAE, "appo" without V-trace: behaviour values (the PPO recipe).
    GAE, "a3c": current values, no importance correction.
    """
    r = rollout
    if uses_vtrace(settings, algorithm):
        vtrace = vtrace_targets(
            behaviour_log_probs=r.behaviour_log_probs,
            target_log_probs=r.log_probs.detach(),
            rewards=r.rewards,
            values=values[:-1],
            bootstrap_value=values[-1],
            dones=r.dones,
            gamma=settings.gamma,
            rho_bar=settings.vtrace_rho_bar,
            c_bar=settings.vtrace_c_bar,
            valids=r.valids,
        )
        return vtrace.pg_advantages, vtrace.vs
    critic_values = r.behaviour_values if algorithm == "appo" else values
    return _gae(settings, critic_values, r.rewards, r.dones, r.valids)


def _gae(
    settings: ActorCriticSettings,
    values: Tensor,
    rewards: Tensor,
    dones: Tensor,
    valids: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """GAE advantages and targets on `values` [T + 1, B] (last row: bootstrap), no grad."""
    values = values.detach()
    return gae_advantages(
        rewards=rewards,
        values=values[:-1],
        bootstrap_value=values[-1],
        dones=dones,
        gamma=settings.gamma,
        lambda_=settings.gae_lambda,
        valids=valids,
    )


def _policy_loss(
    algorithm: str,
    settings: ActorCriticSettings,
    log_probs: Tensor,
    behaviour_log_probs: Tensor,
    advantages: Tensor,
    valids: Tensor | None,
) -> Tensor:
    """PPO clipped surrogate for "appo", plain policy gradient for "impala" and "a3c"."""
    if algorithm == "appo":
        return ppo_clipped_policy_loss(
            log_probs=log_probs,
            behaviour_log_probs=behaviour_log_probs,
            advantages=advantages,
            clip_ratio=settings.ppo_clip_ratio,
            dual_clip=settings.ppo_dual_clip,
            valids=valids,
        )
    return policy_gradient_loss(log_probs=log_probs, advantages=advantages, valids=valids)


def _metrics(
    settings: ActorCriticSettings,
    log_probs: Tensor,
    behaviour_log_probs: Tensor,
    advantages: Tensor,
    values: Tensor,
    targets: Tensor,
    valids: Tensor | None,
) -> dict[str, float]:
    """Float diagnostics over valid samples (no grad).

    approx_kl: KL(mu || pi) estimated as E[(r - 1) - log r] (non-negative, low variance).
    clip_fraction: share of samples whose ratio lies outside the PPO clip window.
    mean_rho: mean unclipped importance ratio pi/mu.
    mean_advantage: mean advantage before normalisation.
    explained_variance: 1 - Var[target - V] / Var[target] (NaN if Var[target] == 0).
    """
    with torch.no_grad():
        log_ratio = (log_probs - behaviour_log_probs).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
        ratio = importance_ratio(log_probs, behaviour_log_probs)
        eps = settings.ppo_clip_ratio
        outside = (ratio > 1.0 + eps) | (ratio < 1.0 / (1.0 + eps))
        return {
            "approx_kl": masked_mean((ratio - 1.0) - log_ratio, valids).item(),
            "clip_fraction": masked_mean(outside.to(ratio.dtype), valids).item(),
            "mean_rho": masked_mean(ratio, valids).item(),
            "mean_advantage": masked_mean(advantages, valids).item(),
            "explained_variance": _explained_variance(values.detach(), targets, valids),
        }


def _explained_variance(values: Tensor, targets: Tensor, valids: Tensor | None) -> float:
    """1 - Var[targets - values] / Var[targets] over valid entries; NaN if Var[targets] == 0."""
    target_var = _masked_var(targets, valids)
    if target_var == 0.0:
        return math.nan
    return 1.0 - _masked_var(targets - values, valids) / target_var


def _masked_var(x: Tensor, valids: Tensor | None) -> float:
    """Population variance of the valid entries of x."""
    centred = x - masked_mean(x, valids)
    return masked_mean(centred**2, valids).item()
