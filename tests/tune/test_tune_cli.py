"""`sampleforge tune` refuses bad input in one line before Ray starts, and says how to install
Ray when it is missing."""

from __future__ import annotations

import sys

import pytest

from sampleforge.cli.main import build_parser, main

pytest.importorskip("ray.tune", reason="the ray extra is not installed")

BASE = ["tune", "--env", "CartPole-v1", "--trial_env_steps", "1000"]


def _exit_code(argv: list[str]) -> int:
    """main's exit code, argparse's own refusals (SystemExit) included."""
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--param", "no_such=1,2"], "no_such: not a setting"),
        (["--param", "learning_rate=1e-4:1e-2"], "a grid search needs values"),
        (["--param", "learning_rate=fast"], "learning_rate"),
        (["--param", "learning_rate"], "expected NAME=A,B,C or NAME=LOW:HIGH"),
        (["--param", "learning_rate=1e-2:1e-4", "--search", "random"], "LOW < HIGH"),
        (["--search", "pbt"], "give the settings to mutate"),
        (["--search", "grid", "--mutate", "learning_rate=1e-5:1e-2"], "only a pbt search"),
        (["--search", "pbt", "--mutate", "rollout=16:64"], "rollout: PBT cannot mutate it"),
        (
            ["--search", "pbt", "--population", "3", "--param", "learning_rate=1e-4,3e-4"]
            + ["--mutate", "learning_rate=1e-5:1e-2"],
            "population 3: must be a multiple of the 2",
        ),
        (["--param", "learning_rate=-1,1e-3"], "learning_rate"),
        (["--device", "cuda:1"], "use --device cuda"),
        (
            ["--with_pbt", "true", "--num_policies", "2"],
            "with_pbt and distributed cannot be used with tune",
        ),
        (["--population", "0"], "--population"),
        (["--max_failures", "-1"], "--max_failures"),  # Ray reads < 0 as "retry for ever"
        (["--gpus_per_trial", "-1"], "--gpus_per_trial"),
        (["--gpus_per_trial", "nan"], "--gpus_per_trial"),
        (["--param", "device=cpu,cuda:1"], "'cuda:1' picks a GPU; under Ray Tune use --device"),
        # One value with a colon is a value of a setting that is not a number, not a range.
        (["--param", "device=cuda:1"], "'cuda:1' picks a GPU; under Ray Tune use --device"),
        (["--perturbation_factors", "1.2"], "--perturbation_factors"),
    ],
)
def test_bad_input_is_one_line_and_starts_nothing(flags, expected, capsys, tmp_path, monkeypatch):
    import ray

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started for a bad command")

    monkeypatch.setattr(ray, "init", no_ray)
    code = _exit_code([*BASE, "--train_dir", str(tmp_path), *flags])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert expected in err
    assert list(tmp_path.iterdir()) == []  # no search folder, no trial


def test_missing_ray_is_one_line_naming_the_extra(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "ray.tune", None)  # `import ray.tune` now fails
    code = main([*BASE, "--train_dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [err.strip()]
    assert "pip install -e '.[ray]'" in err


def test_every_tune_flag_has_help():
    parser = build_parser()
    [sub] = [a for a in parser._actions if a.dest == "command"]
    tune = sub.choices["tune"]
    for action in tune._actions:
        if action.option_strings and action.dest != "help":
            assert action.help and action.help.strip(), action.option_strings


def test_a_trial_bigger_than_the_local_machine_is_refused(capsys, tmp_path, monkeypatch):
    import ray

    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: None)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    # 2 rollout workers, 1 inference worker, 1 learner: 4 processes, 4 CPUs.
    code = _exit_code([*BASE, "--train_dir", str(tmp_path), "--num_workers", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "a trial needs 4 CPUs" in err and "this machine has 2" in err
    assert list(tmp_path.iterdir()) == []


def test_a_searched_value_that_makes_a_trial_too_big_is_refused(capsys, tmp_path, monkeypatch):
    import ray

    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: None)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 3.0})
    # The base (1 worker) fits in 3 CPUs; the searched 2 workers do not, and would wait for
    # ever as a PENDING trial.
    argv = [*BASE, "--train_dir", str(tmp_path), "--param", "num_workers=1,2"]
    code = _exit_code(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "a trial (with num_workers=2) needs 4 CPUs" in err and "this machine has 3" in err
    assert list(tmp_path.iterdir()) == []
