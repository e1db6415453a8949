"""The algorithms `--algorithm` offers, and the family each belongs to.

Responsible for: the names and families, which the model factory (`models/factory.py`) and the
learner registry (`learners/registry.py`) dispatch on, so that nothing else in the package
asks which algorithm runs.

A family shares a model, a learner and its staging and gating: `actor_critic` (APPO, IMPALA,
A3C: one actor-critic loss, `algo/actor_critic_loss.py`, with different settings).

Must not: import models, learners or anything above config.
"""

from __future__ import annotations

from typing import Literal

AlgorithmName = Literal["appo", "impala", "a3c"]
FamilyName = Literal["actor_critic"]

ALGORITHM_FAMILIES: dict[str, FamilyName] = {
    "appo": "actor_critic",
    "impala": "actor_critic",
    "a3c": "actor_critic",
}


def algorithm_family(algorithm: str) -> FamilyName:
    """The family of `algorithm` (validation has checked the name)."""
    return ALGORITHM_FAMILIES[algorithm]
