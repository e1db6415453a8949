"""`sampleforge enjoy`, `eval` and `export` on a trained experiment."""

import json
import re

import imageio.v2 as imageio
import numpy as np
import onnxruntime
import pytest
import torch

from sampleforge.cli.main import main
from sampleforge.envs import env_info
from sampleforge.evaluation import (
    LocalPolicy,
    find_checkpoint,
    read_experiment_config,
    read_weights_file,
)
from sampleforge.export import PolicyStep

pytestmark = pytest.mark.timeout(180)


def _flags(experiment):
    return ["--train_dir", str(experiment.parent), "--experiment", experiment.name]


def test_enjoy_prints_returns_and_writes_a_playable_video(experiment, capsys):
    assert main(["enjoy", *_flags(experiment), "--max_num_episodes", "2", "--save_video"]) == 0
    out = capsys.readouterr().out
    lengths = [int(n) for n in re.findall(r"episode \d+: return [\d.]+, length (\d+)", out)]
    assert len(lengths) == 2
    video = experiment / "replay.mp4"
    frames = [frame for frame in imageio.get_reader(video)]  # len() of the reader is inf
    assert len(frames) == sum(n + 1 for n in lengths)  # the reset frame, then one per step
    assert frames[0].shape == (400, 608, 3)  # CartPole's 600 px, padded to 16-pixel blocks
    assert f"video: {video} ({len(frames)} frames at 50 fps)" in out


def test_enjoy_without_an_experiment_is_bad_input(tmp_path, capsys):
    code = main(["enjoy", "--train_dir", str(tmp_path), "--experiment", "missing"])
    assert code == 2
    assert "is not an experiment folder" in capsys.readouterr().err


def test_eval_in_processes_matches_one_process(experiment, capsys):
    args = ["eval", *_flags(experiment), "--eval_episodes", "6", "--seed", "4", "--json"]
    assert main([*args, "--num_processes", "2"]) == 0
    pooled = json.loads(capsys.readouterr().out)
    assert main([*args, "--num_processes", "1"]) == 0
    single = json.loads(capsys.readouterr().out)
    assert pooled["returns"] == single["returns"] and pooled["episodes"] == 6
    assert pooled["min"] <= pooled["mean"] <= pooled["max"]
    assert pooled["std"] == pytest.approx(np.std(pooled["returns"]))


def test_eval_of_the_best_evaluated_weights(experiment, capsys):
    assert (
        main(
            [
                "eval",
                *_flags(experiment),
                "--checkpoint",
                "best_eval",
                "--eval_episodes",
                "2",
                "--num_processes",
                "1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert str(experiment / "eval" / "p0" / "best.pt") in out
    assert "episodes 2: mean return" in out


def test_export_onnx_matches_pytorch(experiment, capsys, tmp_path):
    output = tmp_path / "policy.onnx"
    assert main(["export", *_flags(experiment), "--format", "onnx", "--output", str(output)]) == 0
    assert "outputs action, action_logits, value" in capsys.readouterr().out
    cfg = read_experiment_config(experiment)
    info = env_info("CartPole-v1")
    policy = LocalPolicy.build(
        cfg,
        info.observation_space,
        info.action_space,
        state_dict=read_weights_file(find_checkpoint(experiment)),
    )
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    with torch.no_grad():
        expected = [t.numpy() for t in PolicyStep(policy.model)(torch.from_numpy(obs))]
    session = onnxruntime.InferenceSession(str(output))
    actual = session.run(None, {"obs": obs})
    np.testing.assert_array_equal(actual[0], expected[0])  # deterministic actions
    np.testing.assert_allclose(actual[1], expected[1], atol=1e-5)  # logits
    np.testing.assert_allclose(actual[2], expected[2], atol=1e-5)  # values
    greedy, _ = policy.predict(obs, deterministic=True)
    np.testing.assert_array_equal(actual[0][:, 0], greedy)
