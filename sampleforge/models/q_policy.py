"""A Q-network as a policy: how the value-based algorithms act.

Responsible for: ``QPolicy``, the ``Policy`` that inference, evaluation, ``enjoy``, ``export``
and the Python API act through for every value-based algorithm: greedy in its Q-values, with
epsilon-greedy exploration per env (``models/exploration.py``) or noisy layers. Its weights
include the env steps the learner has trained on, so inference anneals epsilon with no channel
but the published weights.

Must not: compute losses or targets, or own the target network (the learner does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from sampleforge.models.exploration import epsilon_greedy, ladder_epsilons, linear_epsilon
from sampleforge.models.policy import ActOutput, ObsDict, Policy
from sampleforge.models.q_network import QNetwork


@dataclass(frozen=True)
class Exploration:
    """How a value-based policy explores while it trains (``ValueSettings`` has each field)."""

    kind: Literal["linear", "ladder", "noisy"] = "linear"
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    anneal_env_steps: int = 10_000
    ladder_base: float = 0.4
    ladder_alpha: float = 7.0
    num_envs: int = 1  # the envs of the sampler: the ladder's N


class QPolicy(Policy):
    """Acts greedily in ``network``'s Q-values, exploring as ``exploration`` says."""

    trained_env_steps: Tensor

    def __init__(self, network: QNetwork, exploration: Exploration) -> None:
        super().__init__()
        self.network = network
        self.exploration = exploration
        self.explores_per_env = exploration.kind == "ladder"
        # Set by the learner before it publishes; inference anneals epsilon by it.
        self.register_buffer("trained_env_steps", torch.zeros((), dtype=torch.int64))

    @property
    def num_actions(self) -> int:
        return self.network.num_actions

    def set_trained_env_steps(self, env_steps: int) -> None:
        self.trained_env_steps.fill_(int(env_steps))

    def epsilons(self, batch: int, env_ids: Tensor | None, device: torch.device) -> Tensor:
        """[batch] epsilons of the acting envs (env_ids [batch], the sampler's env indices)."""
        e = self.exploration
        if e.kind == "noisy":
            return torch.zeros(batch, device=device)
        if e.kind == "ladder":
            ids = env_ids if env_ids is not None else torch.arange(batch, device=device)
            return ladder_epsilons(ids.to(device), e.num_envs, e.ladder_base, e.ladder_alpha)
        eps = linear_epsilon(
            int(self.trained_env_steps), e.epsilon_start, e.epsilon_end, e.anneal_env_steps
        )
        return torch.full((batch,), eps, device=device)

    def act(
        self,
        obs: ObsDict,
        rnn_states: Tensor,
        deterministic: bool = False,
        env_ids: Tensor | None = None,
    ) -> ActOutput:
        """Greedy actions (``deterministic``: the mean weights of noisy layers, evenly spaced
        quantile fractions), else epsilon-greedy per env with freshly drawn noise and sampled
        quantile fractions. ``values``: max_a Q(s, a). No recurrent state."""
        if deterministic:
            q = self._q_values(obs, training_mode=False)
            actions = q.argmax(dim=1)
            log_probs = torch.zeros(actions.shape, device=q.device)
        else:
            q = self._q_values(obs, training_mode=True)
            epsilons = self.epsilons(q.shape[0], env_ids, q.device)
            actions, log_probs = epsilon_greedy(q, epsilons)
        return ActOutput(actions[:, None], log_probs, q.max(dim=1).values, rnn_states)

    def _q_values(self, obs: ObsDict, training_mode: bool) -> Tensor:
        was_training = self.network.training
        self.network.train(training_mode)
        try:
            if training_mode and self.exploration.kind == "noisy":
                self.network.reset_noise()
            return self.network.q_values(obs)
        finally:
            self.network.train(was_training)

    def forward(self, obs: ObsDict) -> Tensor:
        """Greedy Q-values [B, A] (what ``export`` traces)."""
        return self.network.q_values(obs)
