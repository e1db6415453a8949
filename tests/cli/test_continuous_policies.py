"""`enjoy`, `eval` and `export` on a continuous-control (SAC) experiment, and `train` refusing
a continuous-control algorithm on an env it cannot act in."""

import json
import re

import numpy as np
import onnxruntime
import pytest
import torch

from sampleforge.cli.main import main
from sampleforge.envs.registry import resolve_env
from sampleforge.evaluation import run_episodes
from sampleforge.models.continuous_policy import ContinuousPolicy
from sampleforge.testing.experiment_files import experiment_flags, experiment_policy

pytestmark = pytest.mark.timeout(180)


def test_enjoy_plays_a_sac_policy(sac_experiment, capsys):
    assert main(["enjoy", *experiment_flags(sac_experiment), "--max_num_episodes", "1"]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"episode \d+: return -?[\d.]+, length 200", out)) == 1


def test_eval_of_a_sac_policy_matches_the_python_evaluation(sac_experiment, capsys):
    flags = experiment_flags(sac_experiment)
    args = ["eval", *flags, "--eval_episodes", "2", "--seed", "4", "--json"]
    assert main([*args, "--num_processes", "2"]) == 0
    pooled = json.loads(capsys.readouterr().out)
    policy = experiment_policy(sac_experiment, "Pendulum-v1")
    assert isinstance(policy.model, ContinuousPolicy)
    local = run_episodes(policy, resolve_env("Pendulum-v1"), 2, seed=4, deterministic=True)
    # The same episodes; a continuous action from a batch of another size differs in its last
    # bits (the matrix products sum in another order), so the returns agree to rounding.
    assert pooled["returns"] == pytest.approx(list(local.returns), rel=1e-5)
    assert pooled["episodes"] == 2


def test_export_of_a_sac_policy_gives_its_deterministic_actions_in_the_bounds(
    sac_experiment, capsys, tmp_path
):
    output = tmp_path / "policy.onnx"
    assert main(["export", *experiment_flags(sac_experiment), "--output", str(output)]) == 0
    assert "inputs obs; outputs action" in capsys.readouterr().out
    policy = experiment_policy(sac_experiment, "Pendulum-v1")
    obs = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    (action,) = onnxruntime.InferenceSession(str(output)).run(None, {"obs": obs})
    deterministic, _ = policy.predict(obs, deterministic=True)
    np.testing.assert_allclose(action, deterministic.reshape(action.shape), rtol=1e-5, atol=1e-5)
    assert (np.abs(action) <= 2.0).all() and action.std() > 0  # Pendulum's torque bounds
    with torch.no_grad():
        normalizer = policy.model.obs_normalizer
        assert normalizer is not None and int(normalizer.count) > 0  # saved with the model


def test_a_continuous_algorithm_on_discrete_actions_is_refused_before_anything_starts(
    tmp_path, capsys
):
    train_dir = tmp_path / "runs"
    args = ["--env", "CartPole-v1", "--train_dir", str(train_dir), "--device", "cpu"]
    assert main(["train", "--algorithm", "sac", *args]) == 2
    err = capsys.readouterr().err
    assert err == (
        "sampleforge: invalid config: algorithm 'sac' cannot act in env 'CartPole-v1': "
        "continuous-control algorithms need Box actions; got Discrete; algorithms that fit it: "
        "appo, impala, a3c, dqn, rainbow, qrdqn, iqn, fqf, mdqn, pqn\n"
    )
    assert not train_dir.exists()  # nothing written
