"""The named reasons a step is not trained on, and `trainable`, which combines them."""

import numpy as np
import pytest
import torch

from sampleforge.buffers.step_validity import RECORDED, Excluded, exclude, trainable


@pytest.mark.parametrize("reason", RECORDED)
def test_exclude_clears_only_the_given_steps(reason):
    valids = np.ones(5, np.float32)
    exclude(valids, [1, 3], reason)
    assert valids.tolist() == [1, 0, 1, 0, 1]


@pytest.mark.parametrize("reason", [Excluded.OTHER_POLICY, Excluded.TOO_STALE])
def test_learner_side_reasons_are_not_recorded(reason):
    with pytest.raises(ValueError, match="learner"):
        exclude(np.ones(2), 0, reason)


def test_trainable_combines_recorded_policy_and_staleness():
    recorded = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0])
    policy_ids = torch.tensor([0, 1, 0, 0, 0])
    lags = torch.tensor([0.0, 0.0, 9.0, 0.0, 3.0])
    assert trainable(recorded, policy_ids, 0).tolist() == [1, 0, 1, 0, 1]
    assert trainable(recorded, policy_ids, 0, lags, max_policy_lag=5).tolist() == [1, 0, 0, 0, 1]
    assert trainable(recorded, policy_ids, 1).tolist() == [0, 1, 0, 0, 0]


def test_staleness_needs_its_bound():
    with pytest.raises(ValueError, match="max_policy_lag"):
        trainable(torch.ones(2), torch.zeros(2), 0, lags=torch.zeros(2))
