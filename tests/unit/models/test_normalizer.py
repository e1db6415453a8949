"""Unit tests for RunningMeanStd: statistics match numpy, buffers are saved, clipping works."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sampleforge.models.normalizer import RunningMeanStd


@pytest.mark.parametrize("shape", [(3,), (2, 4)])
def test_matches_numpy_over_several_batches(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    rms = RunningMeanStd(shape)
    batches = [rng.normal(loc=3.0, scale=2.0, size=(n, *shape)) for n in (7, 1, 50, 13)]
    for batch in batches:
        rms.update(torch.as_tensor(batch, dtype=torch.float32))
    data = np.concatenate(batches)
    np.testing.assert_allclose(rms.mean.numpy(), data.mean(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rms.var.numpy(), data.var(axis=0), rtol=1e-4, atol=1e-5)
    assert int(rms.count) == len(data)


def test_leading_dims_are_flattened_and_empty_batch_is_a_no_op() -> None:
    rms = RunningMeanStd((2,))
    x = torch.arange(24, dtype=torch.float32).reshape(3, 4, 2)  # [T, B, 2]
    rms.update(x)
    rms.update(torch.zeros(0, 2))
    np.testing.assert_allclose(rms.mean.numpy(), x.reshape(-1, 2).mean(0).numpy(), rtol=1e-6)
    assert int(rms.count) == 12


def test_buffers_are_in_state_dict_and_round_trip() -> None:
    rms = RunningMeanStd((3,))
    rms.update(torch.randn(20, 3) * 4 + 1)
    state = rms.state_dict()
    assert {"mean", "var", "count"} <= set(state)
    assert not list(rms.parameters())  # statistics are not trained
    restored = RunningMeanStd((3,))
    restored.load_state_dict(state)
    x = torch.randn(5, 3)
    torch.testing.assert_close(restored.normalize(x), rms.normalize(x))


def test_normalize_standardises_and_clips() -> None:
    rms = RunningMeanStd((1,), clip=2.0)
    rms.update(torch.tensor([[0.0], [2.0]]))  # mean 1, std 1
    out = rms.normalize(torch.tensor([[1.0], [2.0], [100.0], [-100.0]]))
    torch.testing.assert_close(out, torch.tensor([[0.0], [1.0], [2.0], [-2.0]]))
    assert RunningMeanStd((1,)).clip == 5.0
