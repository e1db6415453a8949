"""`sampleforge enjoy`, `eval` and `export` on a trained experiment."""

import json
import re

import imageio.v2 as imageio
import numpy as np
import onnxruntime
import pytest
import torch

from sampleforge.cli.main import main
from sampleforge.export import PolicyStep
from sampleforge.testing.experiment_files import experiment_flags, experiment_policy

pytestmark = pytest.mark.timeout(180)


def test_enjoy_prints_returns_and_writes_a_playable_video(experiment, capsys):
    flags = experiment_flags(experiment)
    assert main(["enjoy", *flags, "--max_num_episodes", "2", "--save_video"]) == 0
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


@pytest.mark.parametrize("command", ["eval", "enjoy", "export"])
def test_weights_that_do_not_fit_the_model_are_bad_input_in_one_line(
    experiment, capsys, tmp_path, command
):
    """A flag that changes the network (or another experiment's checkpoint): exit 2 with one
    line. `eval` over processes once hung for ever: the pool rebuilt each process whose
    initializer failed to load the weights."""
    extra = {"eval": ["--num_processes", "2"], "enjoy": ["--max_num_episodes", "1"]}
    extra["export"] = ["--output", str(tmp_path / "policy.onnx")]
    args = [command, *experiment_flags(experiment), "--mlp_hidden_sizes", "32", *extra[command]]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "do not fit this model's network" in err and "Unexpected key(s)" in err
    assert not (tmp_path / "policy.onnx").exists()


def test_eval_in_processes_matches_one_process(experiment, capsys):
    args = ["eval", *experiment_flags(experiment), "--eval_episodes", "6", "--seed", "4", "--json"]
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
                *experiment_flags(experiment),
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
    flags = experiment_flags(experiment)
    assert main(["export", *flags, "--format", "onnx", "--output", str(output)]) == 0
    assert "outputs action, action_logits, value" in capsys.readouterr().out
    policy = experiment_policy(experiment, "CartPole-v1")
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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.onnx"]  # no part file left


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--opset", "3"], "opset 3: the exporter writes opsets 7-"),
        (["--output", "{folder}"], "is a folder: give the path of the .onnx file to write"),
    ],
    ids=["opset", "folder"],
)
def test_export_refuses_an_opset_it_cannot_write_and_a_folder_in_one_line(
    experiment, capsys, tmp_path, flags, message
):
    flags = [flag.format(folder=tmp_path) for flag in flags]
    args = ["export", *experiment_flags(experiment), *flags]
    if "--output" not in flags:
        args += ["--output", str(tmp_path / "policy.onnx")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []
