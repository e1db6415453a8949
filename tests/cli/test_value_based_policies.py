"""`enjoy`, `eval` and `export` on a value-based (DQN) experiment, and `train` refusing a
value-based algorithm on an env it cannot act in."""

import json
import re

import numpy as np
import onnxruntime
import pytest
import torch

from sampleforge.cli.main import main
from sampleforge.envs.registry import resolve_env
from sampleforge.evaluation import run_episodes
from sampleforge.models.q_policy import QPolicy
from sampleforge.testing.experiment_files import experiment_flags, experiment_policy

pytestmark = pytest.mark.timeout(180)


def test_enjoy_plays_a_dqn_policy(dqn_experiment, capsys):
    assert main(["enjoy", *experiment_flags(dqn_experiment), "--max_num_episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"episode \d+: return [\d.]+, length \d+", out)) == 2
    assert "mean return" in out


def test_eval_of_a_dqn_policy_matches_the_python_evaluation(dqn_experiment, capsys):
    flags = experiment_flags(dqn_experiment)
    args = ["eval", *flags, "--eval_episodes", "3", "--seed", "4", "--json"]
    assert main([*args, "--num_processes", "2"]) == 0
    pooled = json.loads(capsys.readouterr().out)
    policy = experiment_policy(dqn_experiment, "CartPole-v1")
    assert isinstance(policy.model, QPolicy)
    local = run_episodes(policy, resolve_env("CartPole-v1"), 3, seed=4, deterministic=True)
    assert pooled["returns"] == list(local.returns) and pooled["episodes"] == 3


def test_eval_of_a_dqn_policy_s_best_evaluated_weights(dqn_experiment, capsys):
    args = ["--checkpoint", "best_eval", "--eval_episodes", "2", "--num_processes", "1"]
    assert main(["eval", *experiment_flags(dqn_experiment), *args]) == 0
    out = capsys.readouterr().out
    assert str(dqn_experiment / "eval" / "p0" / "best.pt") in out


def test_export_of_a_dqn_policy_gives_greedy_actions_and_q_values(dqn_experiment, capsys, tmp_path):
    output = tmp_path / "policy.onnx"
    assert main(["export", *experiment_flags(dqn_experiment), "--output", str(output)]) == 0
    assert "inputs obs; outputs action, q_values" in capsys.readouterr().out
    policy = experiment_policy(dqn_experiment, "CartPole-v1")
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    action, q_values = onnxruntime.InferenceSession(str(output)).run(None, {"obs": obs})
    with torch.no_grad():
        expected = policy.model({"obs": torch.from_numpy(obs)}).numpy()
    np.testing.assert_allclose(q_values, expected, rtol=1e-5, atol=1e-5)  # Q ~ 20
    greedy, _ = policy.predict(obs, deterministic=True)
    np.testing.assert_array_equal(action[:, 0], greedy)


def test_a_value_based_algorithm_on_box_actions_is_refused_before_anything_starts(tmp_path, capsys):
    train_dir = tmp_path / "runs"
    args = ["--env", "Pendulum-v1", "--train_dir", str(train_dir), "--device", "cpu"]
    assert main(["train", "--algorithm", "rainbow", *args]) == 2
    err = capsys.readouterr().err
    assert err == (
        "sampleforge: invalid config: algorithm 'rainbow' cannot act in env 'Pendulum-v1': "
        "value-based heads need a Discrete action space; got Box(-2.0, 2.0, (1,), float32); "
        "algorithms that fit it: appo, impala, a3c, ddpg, td3, sac, crossq\n"
    )
    assert not train_dir.exists()  # nothing written
