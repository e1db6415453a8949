"""The algorithms `--algorithm` offers, and the family each belongs to.

Responsible for: the names and families, which the model factory (`models/factory.py`) and the
learner registry (`learners/registry.py`) dispatch on, so that nothing else in the package
asks which algorithm runs.

A family shares a model, a learner and its staging and gating:

- `actor_critic` (APPO, IMPALA, A3C): one actor-critic loss, `algo/actor_critic_loss.py`, with
  different settings; datasets of fresh trajectories, sampling bounded by the policy lag.
- `value_based` (DQN, Rainbow, QR-DQN, IQN, FQF, M-DQN): one Q-network and the TD losses of
  `algo/q_learning.py`, composed by settings; a replay, sampling held to a replay ratio.
- `pqn` (PQN): the same Q-network with LayerNorm, Q(lambda) on fresh trajectories, no replay.
- `continuous_control` (DDPG, TD3, SAC, CrossQ): an actor and an ensemble of critics, the
  losses of `algo/continuous_control.py` composed by settings; the value-based family's replay
  and rate limiter.

Must not: import models, learners or anything above config.
"""

from __future__ import annotations

from typing import Literal

AlgorithmName = Literal[
    "appo",
    "impala",
    "a3c",
    "dqn",
    "rainbow",
    "qrdqn",
    "iqn",
    "fqf",
    "mdqn",
    "pqn",
    "ddpg",
    "td3",
    "sac",
    "crossq",
]
FamilyName = Literal["actor_critic", "value_based", "pqn", "continuous_control"]

ALGORITHM_FAMILIES: dict[str, FamilyName] = {
    "appo": "actor_critic",
    "impala": "actor_critic",
    "a3c": "actor_critic",
    "dqn": "value_based",
    "rainbow": "value_based",
    "qrdqn": "value_based",
    "iqn": "value_based",
    "fqf": "value_based",
    "mdqn": "value_based",
    "pqn": "pqn",
    "ddpg": "continuous_control",
    "td3": "continuous_control",
    "sac": "continuous_control",
    "crossq": "continuous_control",
}


def family_algorithms(family: FamilyName) -> tuple[str, ...]:
    """The algorithms of `family`, in the order above."""
    return tuple(name for name, of in ALGORITHM_FAMILIES.items() if of == family)


def algorithm_family(algorithm: str) -> FamilyName:
    """The family of `algorithm` (validation has checked the name)."""
    return ALGORITHM_FAMILIES[algorithm]


# The families that learn from a replay (the others from fresh trajectories).
REPLAY_FAMILIES: tuple[FamilyName, ...] = ("value_based", "continuous_control")


def uses_replay(algorithm: str) -> bool:
    """Whether `algorithm` learns from a replay, held to `samples_per_insert`."""
    return algorithm_family(algorithm) in REPLAY_FAMILIES
