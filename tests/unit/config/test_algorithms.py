"""Every algorithm `--algorithm` accepts has a family, and every family a learner."""

from typing import get_args

from sampleforge.config.algorithms import ALGORITHM_FAMILIES, AlgorithmName, FamilyName
from sampleforge.learners.registry import FAMILIES


def test_every_algorithm_has_a_family_and_every_family_a_learner():
    assert set(ALGORITHM_FAMILIES) == set(get_args(AlgorithmName))
    assert set(ALGORITHM_FAMILIES.values()) == set(get_args(FamilyName)) == set(FAMILIES)
