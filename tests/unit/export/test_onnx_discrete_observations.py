"""ONNX export of a policy whose Dict observations hold discrete parts: the graph takes the
integer indices (in their compact dtypes) and one-hot encodes them as PyTorch does."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from sampleforge.export.onnx_export import PolicyStep, export_onnx
from sampleforge.models.actor_critic import ActorCritic
from sampleforge.spaces import observation_to_dict

onnxruntime = pytest.importorskip("onnxruntime")

SPACE = gym.spaces.Dict(
    {
        "image": gym.spaces.Box(0, 255, (7, 7, 3), np.uint8),
        "direction": gym.spaces.Discrete(4, start=1),
        "cells": gym.spaces.MultiDiscrete([3, 5]),
        "flags": gym.spaces.MultiBinary(2),
    }
)


# The tracer's notes on the GRU's shape checks, which hold for every batch size.
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_export_takes_integer_indices_and_matches_pytorch(tmp_path) -> None:
    torch.manual_seed(0)
    model = ActorCritic(SPACE, gym.spaces.Discrete(4), rnn_type="gru", rnn_size=8)
    export = export_onnx(model, tmp_path / "policy.onnx")
    assert export.input_names == ("cells", "direction", "flags", "image", "rnn_state")
    SPACE.seed(0)
    rows = [observation_to_dict(SPACE.sample(), SPACE) for _ in range(16)]
    feeds = {key: np.stack([row[key] for row in rows]) for key in rows[0]}
    feeds["rnn_state"] = np.zeros((16, model.rnn_state_size), np.float32)
    session = onnxruntime.InferenceSession(str(export.path))
    types = {i.name: i.type for i in session.get_inputs()}
    assert types["direction"] == "tensor(int8)" and types["flags"] == "tensor(int8)"
    actual = session.run(None, feeds)
    with torch.no_grad():
        expected = PolicyStep(model)(*(torch.from_numpy(feeds[n]) for n in export.input_names))
    np.testing.assert_array_equal(actual[0], expected[0].numpy())  # deterministic actions
    for got, want in zip(actual[1:], expected[1:]):
        np.testing.assert_allclose(got, want.numpy(), atol=1e-5)
