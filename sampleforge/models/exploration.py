"""Epsilon-greedy exploration per env, as the value-based policies act.

Responsible for: the epsilon each env acts with: the same linearly annealed epsilon for every env
(Mnih et al. 2015), or Ape-X's fixed ladder eps_i = eps^(1 + alpha i / (N - 1)) over the N envs
of the sampler (Horgan et al. 2018, section 4.1), and drawing epsilon-greedy actions with their
behaviour log-probabilities.

Must not: know networks, configs or processes.
"""

from __future__ import annotations

import torch
from torch import Tensor


def linear_epsilon(env_steps: int, start: float, end: float, anneal_steps: int) -> float:
    """start -> end linearly over the first `anneal_steps` env steps, then end."""
    fraction = min(1.0, max(0, env_steps) / max(1, anneal_steps))
    return start + fraction * (end - start)


def ladder_epsilons(env_ids: Tensor, num_envs: int, base: float, alpha: float) -> Tensor:
    """Ape-X's eps_i = base^(1 + alpha i / (N - 1)) for env i of N; [B] int -> [B] float.
    One env gets `base` itself."""
    if num_envs <= 1:
        return torch.full(env_ids.shape, base, dtype=torch.float32, device=env_ids.device)
    exponent = 1.0 + alpha * (env_ids.float() % num_envs) / (num_envs - 1)
    return torch.pow(torch.tensor(base, device=env_ids.device), exponent)


def epsilon_greedy(q: Tensor, epsilons: Tensor) -> tuple[Tensor, Tensor]:
    """Actions [B] (int64) drawn epsilon-greedily from q [B, A] with per-row epsilons [B], and
    their log-probabilities under that behaviour policy [B]: log(1 - eps + eps / A) for the
    greedy action, log(eps / A) for any other."""
    num_actions = q.shape[1]
    greedy = q.argmax(dim=1)
    explore = torch.rand(q.shape[0], device=q.device) < epsilons
    random = torch.randint(num_actions, greedy.shape, device=q.device)
    actions = torch.where(explore, random, greedy)
    p_other = epsilons / num_actions
    probs = torch.where(actions == greedy, 1.0 - epsilons + p_other, p_other)
    return actions, torch.log(probs.clamp_min(1e-30))
