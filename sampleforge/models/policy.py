"""What acting asks of a policy's network, whichever algorithm trains it.

Responsible for: the base class that inference workers, evaluation (`LocalPolicy`, `enjoy`,
`eval`) and the Python API act through, so that they accept any family's network: an
actor-critic today, a Q-network or a deterministic actor as their families arrive. A family's
network subclasses `Policy` and is built by `models/factory.py: make_policy_model`.

Must not: hold any family's logic.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import torch
from torch import nn

ObsDict = Mapping[str, torch.Tensor]


class ActOutput(NamedTuple):
    """Result of ``Policy.act`` for B envs."""

    actions: torch.Tensor  # [B, A], dtype per spaces.action_spec
    log_probs: torch.Tensor  # [B], of the actions under the acting (behaviour) policy
    values: torch.Tensor  # [B], the network's value estimate, in reward units
    new_rnn_states: torch.Tensor  # [B, S]


class Policy(nn.Module):
    """A network that acts for B envs at once. Its weights are shared with inference and
    checkpointed through its state dict, so every family's network is an `nn.Module`."""

    #: S, the width of the flat recurrent state per env (0 without recurrence).
    rnn_state_size: int = 0
    #: Whether `act` uses `env_ids` (inference computes them only then).
    explores_per_env: bool = False

    def act(
        self,
        obs: ObsDict,
        rnn_states: torch.Tensor,
        deterministic: bool = False,
        env_ids: torch.Tensor | None = None,
    ) -> ActOutput:
        """One step for B envs: obs {key: [B, ...]}, rnn_states [B, S] (zeroed by the caller
        for envs that just reset) -> actions [B, A], log-probabilities [B], values [B] and
        the next states [B, S]. ``deterministic``: the policy's most likely action.
        ``env_ids`` [B]: which of the sampler's envs each row is, for a policy that explores
        differently per env (None: rows 0..B-1)."""
        raise NotImplementedError
