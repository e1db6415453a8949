"""Shared fixtures of the learner unit tests."""

from collections.abc import Callable

import pytest
import torch

from sampleforge.learners.batcher import Dataset


@pytest.fixture
def make_dataset() -> Callable[..., Dataset]:
    """A [T, B] dataset of a 4-dim observation and 2 actions, as the batcher hands it over."""
    return _dataset


def _dataset(T=9, B=4, reward=0.0) -> Dataset:
    g = torch.Generator().manual_seed(0)
    return Dataset(
        obs={"obs": torch.rand(T, B, 4, generator=g)},
        actions=torch.randint(0, 2, (T, B, 1), generator=g),
        rnn_states=torch.zeros(T, B, 0),
        rewards=torch.full((T, B), reward),
        dones=torch.zeros(T, B),
        valids=torch.ones(T, B),
        log_probs=torch.full((T, B), -0.69),
        values=torch.zeros(T, B),
        policy_versions=torch.zeros(T, B, dtype=torch.int64),
        policy_ids=torch.zeros(T, B, dtype=torch.int32),
    )
