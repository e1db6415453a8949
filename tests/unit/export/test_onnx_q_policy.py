"""ONNX export of the value-based algorithms' Q-networks: observations in, the greedy action
and the Q-values out, matching PyTorch for every Q head at a batch size other than the traced
one."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from sampleforge.config import make_config
from sampleforge.config.algorithms import family_algorithms
from sampleforge.export import QPolicyStep, acting_step, export_onnx
from sampleforge.models.factory import make_policy_model
from sampleforge.models.policy import Policy

onnxruntime = pytest.importorskip("onnxruntime")

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACTIONS = gym.spaces.Discrete(3)
VALUE_BASED = family_algorithms("value_based") + family_algorithms("pqn")


@pytest.mark.parametrize("algorithm", VALUE_BASED)
def test_export_gives_greedy_actions_and_q_values_as_pytorch(algorithm, tmp_path) -> None:
    torch.manual_seed(0)
    cfg = make_config(env="CartPole-v1", algorithm=algorithm, mlp_hidden_sizes=(16,))
    model = make_policy_model(cfg, OBS, ACTIONS)
    export = export_onnx(model, tmp_path / "policy.onnx")
    assert isinstance(acting_step(model), QPolicyStep)
    assert export.input_names == ("obs",) and export.output_names == ("action", "q_values")
    obs = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)  # traced with 2
    action, q_values = onnxruntime.InferenceSession(str(export.path)).run(None, {"obs": obs})
    with torch.no_grad():
        expected_q = model({"obs": torch.from_numpy(obs)})
        greedy = model.act({"obs": torch.from_numpy(obs)}, torch.zeros(7, 0), deterministic=True)
    assert q_values.shape == (7, 3) and action.shape == (7, 1) and action.dtype == np.int64
    np.testing.assert_allclose(q_values, expected_q.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(action, greedy.actions.numpy())  # what evaluation plays


def test_a_network_without_an_acting_step_is_refused_by_name(tmp_path) -> None:
    class Custom(Policy):
        pass

    with pytest.raises(TypeError, match="cannot export a Custom: export knows ActorCritic"):
        export_onnx(Custom(), tmp_path / "policy.onnx")
